"""Object storage: the S3 client, the embedded S3 server, publishing a run folder, uploading a package."""
