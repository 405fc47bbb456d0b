"""Children for the sandbox tests: each answers a hello, then misbehaves on request."""
import ctypes
import os
import time


def serve(conn, behaviour: str = "echo") -> None:
    conn.send(("hello", os.getpid()))
    while True:
        kind, payload = conn.recv()
        if kind == "exit":
            return
        if behaviour == "echo" or kind == "echo":
            conn.send(("echo", payload))
        elif behaviour == "hang":
            while True:
                time.sleep(1)
        elif behaviour == "abort":
            os.abort()
        elif behaviour == "segfault":
            ctypes.string_at(0)
        elif behaviour == "exit":
            os._exit(7)
        elif behaviour == "hog":
            hoard = []
            while True:
                hoard.append(bytearray(64 << 20))
                for i in range(0, len(hoard[-1]), 4096):
                    hoard[-1][i] = 1
                time.sleep(0.01)
