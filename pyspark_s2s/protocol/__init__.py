"""The pure Site-to-Site protocol core, shared by the client and the reference server.

Standard library only; no sockets, threads, clock or randomness of its own (callers pass
time and random sources in). Modules:

* ``codes``       response codes, header names, directions, the JSON result entity
* ``codec``       packet encoder, incremental decoder, CRC32, fast packet scanner
* ``compression`` NiFi's SYNC compression framing
* ``stream``      codec + compression + CRC, as an HTTP body carries them
* ``endpoints``   URL paths of every endpoint
* ``transaction`` transaction state machines (transition tables)
* ``negotiation`` transport version negotiation and handshake properties
* ``urls``        cluster URL parsing and normalisation
* ``peers``       peer weights, selection, penalization, persistence format
* ``raw``         the RAW socket transport: magic, resource negotiation, handshake, response
                  codes, peer list, packet sections and checksum confirmation
"""
