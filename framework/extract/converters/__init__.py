"""The converters of :mod:`framework.extract.convert`, one module per kind of value;
import them from there (it is the registry and holds the contract)."""
