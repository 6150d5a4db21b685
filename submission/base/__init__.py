"""The ground every other part of `submission/` stands on: the strict schema base (`schema`), the error hierarchy
(`errors`), atomic durable files and hashes (`files`), Markdown that renders as written (`markdown`).

Imports nothing of Podium's.
"""
