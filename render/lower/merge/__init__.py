"""Calls of one function that differ, written as one def: the merge steps of a lowering.

`shared_defs` (the step `pipeline` runs: calls whose defs differ only in numbers or in branches share
one def), `branch_flags` (branches taken differently, under static flags), `keyword_args` (numbers that
differ, as keyword-only arguments), and, with a way to trace again, `input_sizes` (numbers that follow
the inputs' shapes, as size expressions), with `size_names` (sizes bound under torch's names),
`size_guards` (a `ValueError` for a size the export does not take) and `same_size` (whether a merged
def still computes the traced program).
"""
