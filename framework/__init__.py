"""framework: declarative, resumable scraping on Scrapy.

Data flows one way: ``job.yaml -> JobSpec -> Spider -> pipeline -> workspace``;
shipping and ingest are plugins and are never imported from here.
"""

__version__ = "0.7.0"  # the same as pyproject.toml (tests/test_docs_reference.py)
