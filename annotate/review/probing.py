"""Which leaves of its weight arguments a function port reads: the port run once on stand-ins.

A stand-in (`_Probe`) is handed where the port expects its params pytree. Indexing it with a string
or an int makes a child stand-in; using one as an array makes it a leaf, resolved to the torch
tensor its path resembles; `"bias" in p` asks whether the torch module `p` resembles has a `bias`.
A leaf is used as an array in one of three ways:

- through a method or attribute (`w.T`, `w.shape`, `x @ w`), which the stand-in forwards;
- as an argument of a jitted function (`jnp.take(w, idx, axis=0)`, `jax.nn.relu(w)`): the stand-in
  is a registered pytree node whose one child is its array, so `jit` flattens it to the tensor;
- as an argument JAX refuses (a `lax` primitive given `w` itself, `jnp.asarray(w)`): the run fails
  with an error naming the stand-in's type, and is run again with every stand-in it made but never
  indexed handed to the port as the array itself.

The last way costs a run per weight so used; the others cost nothing. Nothing here guesses at a
leaf: a path is a leaf only once the port has used it as an array.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from jaxside.annotate.review.mapping import Mapping, assign, best_match, tokens
from jaxside.render.names import is_index


class _Probe:
    """Stands in for a port argument whose structure is unknown (see the module docstring)."""

    def __init__(self, path: str, run: _Run) -> None:
        self._path, self._run = path, run
        self._children: dict[Any, _Probe] = {}
        self._array: Any = None
        run.made.append(self)

    def _leaf(self) -> Any:
        if self._array is None:
            self._array = self._run.resolve(self._path)
        return self._array

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, int) and self._array is None and self._run.is_tensor(self._path):
            return self._leaf()[key]  # a row of a tensor (BERT's `token_type_embeddings.weight[0]`)
        if isinstance(key, (str, int)) and not isinstance(key, bool) and self._array is None:
            if key not in self._children:
                child = _Probe(f"{self._path}[{key!r}]", self._run)
                if child._path in self._run.leaves:
                    child._leaf()
                self._children[key] = child
            child = self._children[key]
            return child._array if child._array is not None else child
        return self._leaf()[key]

    def __contains__(self, key: object) -> bool:
        """`"bias" in p`: whether the torch module this stand-in resembles has that tensor."""
        return isinstance(key, str) and self._run.has(self._path, key)

    def __iter__(self) -> Any:
        # One item at a time: an item made before the loop body that fails on the one before it
        # ran would count as a leaf never indexed (CaiT's `for item in params["layers"]`).
        return (self[i] for i in range(len(self)))

    def __len__(self) -> int:
        return self._run.length_of(self._path)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._leaf(), name)

    def __repr__(self) -> str:
        return f"<review stand-in {self._path}>"

    def leaves(self) -> list[str]:
        if self._array is not None:
            return [self._path]
        return [path for child in self._children.values() for path in child.leaves()]

    def build(self, value_of: Callable[[str], Any]) -> Any:
        """The real pytree: dicts for string keys, lists for int keys, arrays at leaves."""
        if self._array is not None or not self._children:
            return value_of(self._path)
        keys = list(self._children)
        if all(isinstance(k, int) for k in keys):
            return [self._children[i].build(value_of) for i in sorted(keys)]
        return {k: self._children[k].build(value_of) for k in keys}


def _binary(name: str) -> Callable[..., Any]:
    def method(self: _Probe, *args: Any) -> Any:
        return getattr(self._leaf(), name)(*args)

    return method


for _name in ("add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "matmul", "rmatmul",
              "pow", "neg", "lt", "le", "gt", "ge", "and", "or", "invert"):
    setattr(_Probe, f"__{_name}__", _binary(f"__{_name}__"))


class _Run:
    """One run of the port on stand-ins: the paths known to be leaves, the stand-ins it made."""

    def __init__(self, resolve: Callable[[str], Any], length: int, leaves: set[str],
                 names: list[str]) -> None:
        self.resolve, self.length, self.leaves, self.names = resolve, length, leaves, names
        self.made: list[_Probe] = []

    def length_of(self, path: str) -> int:
        """How many items a list stand-in at `path` has: the numbered children of the torch list
        most like it (`params['layers']`: `layers.0` ... `layers.N`), else the longest such list."""
        lists = numbered_children(self.names)
        found = best_match(path, sorted(lists), set())
        return len(lists[found]) if found is not None else self.length

    def is_tensor(self, path: str) -> bool:
        """Whether `path` names a torch tensor word for word (`params['wte']['weight']`), so an int
        index on it is a row of it, not an item of a list (`params['layers'][0]`)."""
        words = tokens(path)
        return bool(words) and any(tokens(name) == words for name in self.names)

    def has(self, path: str, key: str) -> bool:
        """Whether the torch module most like `path` (a state_dict name less its last part) holds
        a tensor named `key` (`weight`, `kernel` and `scale` one name)."""
        modules = sorted({name.rpartition(".")[0] for name in self.names if "." in name})
        module = best_match(path, modules, set())
        if module is None:
            return False
        wanted = _LEAF_NAMES.get(key, key)
        return any(name.rpartition(".")[0] == module and _LEAF_NAMES.get(last, last) == wanted
                   for name in self.names for last in [name.rpartition(".")[2]])


_LEAF_NAMES = {"kernel": "weight", "scale": "weight", "embedding": "weight"}
"""A framework's name for what torch calls `weight`."""


def _flatten(probe: _Probe) -> tuple[tuple[Any], None]:
    return (probe._leaf(),), None


def _unflatten(_: None, children: Any) -> Any:
    # What `jit` hands the function it traces: the array itself, never a stand-in again.
    return next(iter(children))


@functools.cache
def _register() -> None:
    import jax

    jax.tree_util.register_pytree_node(_Probe, _flatten, _unflatten)


def numbered_children(names: list[str]) -> dict[str, set[str]]:
    """Each torch list in the state_dict (`layers`) with its numbered children's numbers."""
    counts: dict[str, set[str]] = {}
    for name in names:
        parts = name.split(".")
        for i, part in enumerate(parts):
            if is_index(part):
                counts.setdefault(".".join(parts[:i]), set()).add(part)
    return counts


def layer_count(names: list[str]) -> int:
    """The longest run of numbered children in the state_dict (`layers.0` ... `layers.N`)."""
    return max((len(v) for v in numbered_children(names).values()), default=1)


def _refused(error: BaseException) -> bool:
    """Whether JAX refused a stand-in: its message names the stand-in's type or shows one."""
    text = str(error)
    return _Probe.__name__ in text or "<review stand-in " in text


def discover(fn: Any, names: list[str], state: dict[str, Any], weight_args: list[str],
             data_args: tuple) -> tuple[list[_Probe], Mapping]:
    """Run the port on stand-ins to learn which leaves of its weight arguments it reads, then map
    those leaves to torch tensors one-to-one."""
    import jax

    _register()
    guesses: dict[str, str] = {}

    def resolve(path: str) -> Any:
        name = best_match(path, names, set(guesses.values())) or best_match(path, names, set())
        if name is None:
            raise LookupError(path)
        guesses[path] = name
        return state[name]

    leaves: set[str] = set()
    while True:
        guesses.clear()
        run = _Run(resolve, layer_count(names), leaves, names)
        probes = [_Probe(arg, run) for arg in weight_args]
        given = [probe._leaf() if probe._path in leaves else probe for probe in probes]
        try:
            jax.eval_shape(functools.partial(fn, *given), *data_args)
            break
        except Exception as error:
            used = {probe._path for probe in run.made if not probe._children} - leaves
            if not _refused(error) or not used:
                raise
            leaves |= used
    found = [path for probe in probes for path in probe.leaves()]
    return probes, assign(found, state)
