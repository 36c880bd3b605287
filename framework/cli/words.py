"""Counts in words, for the lines people read: ``1 page``, ``2 pages`` ("1 pages
failed" was not read as a sentence). Regular plurals only: the nouns are the CLI's own."""

from __future__ import annotations


def counted(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
