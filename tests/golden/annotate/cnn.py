"""A small CNN classifier: two conv/batch-norm/ReLU/max-pool stages, global pooling, a Linear head."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class SmallCNN(nn.Module):
    def __init__(self, in_channels: int = 3, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, kernel_size=3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.pool = nn.MaxPool2d(2)
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # jax: def forward(params, x, *, config=Config())
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        # conv1_x = (
        #     lax.conv(
        #         x, params["conv1"]["weight"], window_strides=(1, 1), padding=((1, 1), (1, 1))
        #     )
        #     + params["conv1"]["bias"][:, None, None]
        # )
        # bn1 = (conv1_x - params["bn1"]["running_mean"][:, None, None]) * lax.rsqrt(
        #     params["bn1"]["running_var"][None, :, None, None] + config.eps
        # ) * params["bn1"]["weight"][:, None, None] + params["bn1"]["bias"][:, None, None]
        # x = lax.reduce_window(
        #     jax.nn.relu(bn1),
        #     -jnp.inf,
        #     lax.max,
        #     window_dimensions=(1, 1, 2, 2),
        #     window_strides=(1, 1, 2, 2),
        # )
        x = self.pool(F.relu(self.bn2(self.conv2(x))))
        # conv2_x = (
        #     lax.conv(
        #         x, params["conv2"]["weight"], window_strides=(1, 1), padding=((1, 1), (1, 1))
        #     )
        #     + params["conv2"]["bias"][:, None, None]
        # )
        # bn2 = (conv2_x - params["bn2"]["running_mean"][:, None, None]) * lax.rsqrt(
        #     params["bn2"]["running_var"][None, :, None, None] + config.eps
        # ) * params["bn2"]["weight"][:, None, None] + params["bn2"]["bias"][:, None, None]
        # x = lax.reduce_window(
        #     jax.nn.relu(bn2),
        #     -jnp.inf,
        #     lax.max,
        #     window_dimensions=(1, 1, 2, 2),
        #     window_strides=(1, 1, 2, 2),
        # )
        features = self.global_pool(x).flatten(1)
        # features = jnp.reshape(jnp.mean(x, axis=(3, 2), keepdims=True), (2, -1))
        return self.fc(features)
        # return features @ params["fc"]["weight"].T + params["fc"]["bias"]


def example():
    torch.manual_seed(0)
    model = SmallCNN().eval()
    # Non-trivial running statistics, as a trained model would have, so eval-mode batch norm matters.
    for bn in (model.bn1, model.bn2):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 1.5)
    return model, (torch.randn(2, 3, 16, 16),)
