"""Calls of one function that differ, written as one def: the merge steps of a lowering.

The words: the defs written for the calls of one torch function, where they differ, are its
*variants* (`merge_variants`; a comment's `Note.variants` counts them for a torch line). Variants
alike but for numbers ran the same branches: one *kind*. Kinds differ in the statements they ran
(a block with its downsample branch, one without) and merge under flags, or stay apart, named by
their branch; numbers that differ are fitted to sizes or passed as keyword arguments.

`shared_defs` (the step `pipeline` runs: the variants of each function merged into one def),
`branch_flags` (kinds under static flags, and the names of kinds that stay apart), `keyword_args`
(numbers that differ, as keyword-only arguments), `fitting` (comparing defs, and fitting a number
to the sizes: what `shared_defs` and `input_sizes` share), and, with a way to trace again,
`input_sizes` (numbers that follow the inputs' shapes, as size expressions), with `size_names`
(sizes bound under torch's names), `size_guards` (a `ValueError` for a size the export does not
take) and `same_size` (whether a merged def still computes the traced program).

To add a merge step: a module here with one entry function over the `Function`s it merges, called
from `shared_defs.merge_variants` (calls of one trace) or `input_sizes.generalize` (programs traced
at other sizes).
"""
