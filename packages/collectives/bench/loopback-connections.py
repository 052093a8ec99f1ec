#!/usr/bin/env python3
"""The kernel's loopback alone, with k connections per direction: two processes exchange B bytes
each way at once, split over k connections, reading in place (recv_into), one thread per connection
and direction (the GIL is released in the socket calls). Prints the median ms of an exchange.
Whether several tcp connections per peer could raise the sockets' bound on this machine:
`python3 bench/loopback-connections.py 33554432 1` (then 2, 4). Not part of `pnpm bench`."""
import os
import socket
import statistics
import sys
import threading
import time

B = int(sys.argv[1]) if len(sys.argv) > 1 else 32 << 20
K = int(sys.argv[2]) if len(sys.argv) > 2 else 1
ROUNDS = 31
WARMUP = 2


def run(role, port):
    sends, recvs = [], []
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(('127.0.0.1', port + role))
    listener.listen(64)
    if role == 1:
        time.sleep(0.2)  # the other end listens first
    other = port + 1 - role
    if role == 0:
        recvs = [listener.accept()[0] for _ in range(K)]
        sends = [socket.create_connection(('127.0.0.1', other)) for _ in range(K)]
    else:
        sends = [socket.create_connection(('127.0.0.1', other)) for _ in range(K)]
        recvs = [listener.accept()[0] for _ in range(K)]
    part = B // K
    payload = memoryview(bytearray(B))
    dest = memoryview(bytearray(B))

    def send(i):
        sends[i].sendall(payload[i * part:(i + 1) * part])

    def receive(i):
        view = dest[i * part:(i + 1) * part]
        got = 0
        while got < part:
            got += recvs[i].recv_into(view[got:])

    times = []
    for _ in range(ROUNDS):
        if role == 0:  # start together
            sends[0].sendall(b'x')
            recvs[0].recv(1)
        else:
            recvs[0].recv(1)
            sends[0].sendall(b'x')
        start = time.perf_counter()
        threads = [threading.Thread(target=f, args=(i,)) for f in (send, receive) for i in range(K)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        times.append((time.perf_counter() - start) * 1000)
    if role == 0:
        ms = statistics.median(times[WARMUP:])
        print(f'{K} connection(s) each way, {B} bytes: median {ms:.1f} ms, {B / ms / 1e3:.0f} MB/s each way')


port = 29000 + os.getpid() % 1000 * 2
child = os.fork()
if child == 0:
    run(1, port)
    os._exit(0)
run(0, port)
os.waitpid(child, 0)
