"""Submission day (`podium submit`): what it was asked (`settings`), the submitter id (`identity`), the submission
server's three calls (`server`), the record of what it did (`record`) and the steps as Prefect tasks (`steps`)."""
