"""The pure Site-to-Site protocol core, shared by the client and the reference server.

Standard library only; no sockets, threads, clock or randomness of its own (callers pass
time and random sources in). Modules:

* ``codes``       response codes, header names, directions, the JSON result entity
* ``packet``      the packet layout: DataPacket and the decoder events, the encoder, CRC32
* ``codec``       the incremental packet decoder; re-exports ``packet`` and the fast scanner
* ``scan``        the fast packet scanner (many packets of a buffer, no per-packet objects)
* ``compression`` NiFi's SYNC compression framing
* ``stream``      codec + compression + CRC, as an HTTP body carries them
* ``endpoints``   URL paths of every endpoint
* ``transaction`` transaction state machines (transition tables)
* ``negotiation`` transport version negotiation and handshake properties
* ``urls``        cluster URL parsing and normalisation
* ``peers``       peer weights, selection, penalization, persistence format
* ``raw``         the RAW socket transport (a package: messages, reader, writer, rules, Java
                  UTF): magic, resource negotiation, handshake, response codes, peer list,
                  packet sections and checksum confirmation
* ``_buffer``, ``_crc``  private: the readers' input buffer; which CRC-32 function is used
"""
