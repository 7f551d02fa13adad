"""How Spark reaches a bucket: the storage's own options as per-bucket s3a settings."""

from __future__ import annotations

from checkpoint.storage import Storage


def test_spark_reaches_a_bucket_as_the_storage_does(spark) -> None:
    """Per-bucket s3a settings from the storage's options: an AWS endpoint keeps virtual-host
    addressing and TLS, a session token picks the temporary-credentials provider; another bucket and
    a local root get nothing."""
    from jobs.spark_session import reach

    options = {"key": "AKIA-test", "secret": "s3cr3t", "token": "t0ken",
               "client_kwargs": {"endpoint_url": "https://s3.eu-west-1.amazonaws.com",
                                 "region_name": "eu-west-1"}}  # fmt: skip
    reach(spark, Storage("s3://reach-test-bucket/team/orders", options))
    reach(spark, Storage("/tmp/a-local-checkpoint"))
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    got = {k: hadoop.get(f"fs.s3a.bucket.reach-test-bucket.{k}") for k in (
        "endpoint", "connection.ssl.enabled", "path.style.access", "endpoint.region", "access.key",
        "secret.key", "session.token", "aws.credentials.provider")}  # fmt: skip
    assert got == {
        "endpoint": "https://s3.eu-west-1.amazonaws.com",
        "connection.ssl.enabled": "true",
        "path.style.access": "false",
        "endpoint.region": "eu-west-1",
        "access.key": "AKIA-test",
        "secret.key": "s3cr3t",
        "session.token": "t0ken",
        "aws.credentials.provider": "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider",
    }
    assert hadoop.get("fs.s3a.bucket.another-bucket.endpoint") is None
