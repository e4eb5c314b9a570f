"""Test helpers for op rendering: a flat renderer and checks, an op catalog, a program fuzzer."""
