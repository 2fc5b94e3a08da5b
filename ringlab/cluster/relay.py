"""Jobs as the user who ran sudo: ``sudo ringlab cluster run`` runs the job as ``SUDO_UID``, not as root.

Root is needed only to enter the nodes' namespaces. So the run's own process (root) serves a socket that only
that user may reach (a folder of the user's own, mode 0700): the cluster's ``ssh``, run by the user's mpiexec,
hands over its standard input, output and error, its environment and the command; the run starts the command on
the node, as the user (``setpriv``), and passes back its exit status. Run as a script, this file is that ``ssh``'s
client half (standard library only, so that it starts quickly, as any user).
"""
from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import socket
import sys
import threading

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # where root looks for ip, nsenter
ADDRESS = "RINGLAB_RELAY"  # the socket the cluster's ssh hands its commands to, when its user is not root


def user_of(env) -> tuple[int, int] | None:
    """The (uid, gid) a root run drops to: sudo's SUDO_UID and SUDO_GID, unless they are root's or absent."""
    try:
        uid, gid = int(env["SUDO_UID"]), int(env["SUDO_GID"])
    except (KeyError, ValueError):
        return None
    return (uid, gid) if os.geteuid() == 0 and uid != 0 else None


def home_of(uid: int) -> dict:
    """HOME, USER and LOGNAME of ``uid`` (sudo leaves root's HOME, where a job of the user may not write); empty
    when the system does not know the user."""
    try:
        known = pwd.getpwuid(uid)
    except KeyError:
        return {}
    return {"HOME": known.pw_dir, "USER": known.pw_name, "LOGNAME": known.pw_name}


def as_user(uid: int, gid: int, argv: list[str]) -> list[str]:
    """``argv`` run as ``uid``:``gid``, with the user's groups (none when the system does not know the user)."""
    groups = "--init-groups" if home_of(uid) else "--clear-groups"
    setpriv = shutil.which("setpriv", path=SYSTEM_PATH) or "setpriv"  # root runs it: not one from the job's PATH
    return [setpriv, f"--reuid={uid}", f"--regid={gid}", groups, "--", *argv]


def serve(path: str, uid: int, start) -> socket.socket:
    """Listen at ``path`` (in a folder that only ``uid`` may enter) for the cluster's ssh run by ``uid``;
    ``start(host, command, env, cwd, fds)`` starts the command and returns its Popen. Close the socket to stop."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chown(path, uid, -1)
    listener.listen(64)

    def answer(conn: socket.socket) -> None:
        with conn:
            peer = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
            if int.from_bytes(peer[4:8], sys.byteorder) not in (uid, 0):
                return
            _, fds, _, _ = socket.recv_fds(conn, 1, 3)
            try:
                asked = json.loads(b"".join(iter(lambda: conn.recv(65536), b"")))
                code = start(asked["host"], asked["command"], asked["env"], asked["cwd"], fds).wait()
            except Exception as err:  # says why on the caller's stderr, as ssh would
                if len(fds) == 3:
                    os.write(fds[2], f"ssh: {err}\n".encode())
                code = 255
            finally:
                for fd in fds:
                    os.close(fd)
            with contextlib.suppress(OSError):  # the caller may be gone (ended with the run)
                conn.sendall(str(code if code >= 0 else 128 - code).encode())  # killed by signal N: 128 + N

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # closed: the run is over
                return
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener


def main(host: str, command: str) -> int:
    """The client half: run ``command`` on ``host`` through the run's relay; its exit status."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(os.environ[ADDRESS])
        socket.send_fds(conn, [b"\0"], [0, 1, 2])
        conn.sendall(json.dumps({"host": host, "command": command, "env": dict(os.environ),
                                 "cwd": os.getcwd()}).encode())
        conn.shutdown(socket.SHUT_WR)
        answer = b"".join(iter(lambda: conn.recv(64), b""))
    return int(answer) if answer.strip().isdigit() else 255


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
