"""Scrapy commands the project changes (named by ``COMMANDS_MODULE`` in
:mod:`framework.scrapy_settings`); each module is one command, named as Scrapy's own."""
