"""Test bed shared by the tests and the benchmarks (not shipped in any distribution).

Real parts on loopback, never mocks: object-store servers (fake-gcs-server, moto's S3 server) started
on free localhost ports (:mod:`.object_stores`), error-document builders and a loopback TCP proxy for
the reader (:mod:`.reader_support`), c10d ``TCPStore`` servers and clients (:mod:`.tcp_store`), and
file-system rendezvous between worker processes so that no sleep decides an order (:mod:`.sync`).
Benchmarks import from here, never from ``tests``.
"""
