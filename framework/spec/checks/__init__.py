"""Checks of a spec that stand on their own, one module each, called by
:mod:`framework.spec.validate` (which owns walking the spec and locating problems)."""
