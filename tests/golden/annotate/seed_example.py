"""The project's seed example: a plain torch function with a nested helper."""

import torch


def my_mathy_thing(weight, hidden):  # jax: def my_mathy_thing(weight, hidden)
    def other_math(a, b):  # jax: def other_math(a, b)
        return (a + b) @ (a * b)  # return (a + b) @ (a * b)

    activation = torch.matmul(weight, hidden)  # activation = weight @ hidden
    output = torch.sin(activation) + other_math(weight, hidden)
    # output = jnp.sin(activation) + other_math(weight, hidden)
    return output + hidden  # return output + hidden


def example():
    torch.manual_seed(0)
    return my_mathy_thing, (torch.randn(4, 4), torch.randn(4, 4))
