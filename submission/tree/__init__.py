"""The submission tree: every path of it (`paths`), assembled from finished runs (`assemble`), system descriptions and
the
host facts they come from (`systems`, `host_facts`), accuracy-log truncation (`truncate`), the dress rehearsal's marker
(`rehearsal_marker`), one tree from many runs (`curation`, `curated`), the tarball and its manifest (`package`).

Imports `submission.base`, `submission.rules`, `submission.plan` and `submission.results`.
"""
