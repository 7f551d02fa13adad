"""What the demo, the tests and the benches share, and the wheel does not ship: checkpoints written
by real streaming queries (`corpus`), synthetic checkpoints with the real naming for scale
(`synthetic`), SeaweedFS on loopback (`s3server`), the S3 counting proxy (`s3proxy`), and the
listing-based oracle of what recovery reads (`recovery`). It sits on top: it may import every
shipped package, and none of them imports it."""
