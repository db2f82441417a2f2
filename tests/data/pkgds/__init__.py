"""A package for `package.module:callable` specs (run with tests/data on the import path)."""
