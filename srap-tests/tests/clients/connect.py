"""Opens N TCP connections to HOST:PORT the way ordinary Python clients do,
prints their local ports, and holds them until killed.

usage: connect.py inet|inet6 HOST PORT N [BIND_ADDR]
  inet6: a dual-stack AF_INET6 socket connecting to ::ffff:HOST
  BIND_ADDR: bind that source address first with IP_BIND_ADDRESS_NO_PORT
"""
import socket
import sys
import time

IP_BIND_ADDRESS_NO_PORT = 24


def main():
    family, host, port, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    bind = sys.argv[5] if len(sys.argv) > 5 else None
    held = []
    for _ in range(count):
        if family == "inet6":
            s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            target = ("::ffff:" + host, port)
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            target = (host, port)
        if bind:
            s.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
            s.bind((bind, 0))
        s.connect(target)
        held.append(s)
    print(" ".join(str(s.getsockname()[1]) for s in held), flush=True)
    time.sleep(60)


main()
