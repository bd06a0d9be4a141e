"""workers.pid: the process id without a system call, right after a fork too."""

from __future__ import annotations

import os

from workers.pid import current_pid


def test_current_pid_is_the_process_id_in_parent_and_forked_child() -> None:
    assert current_pid() == os.getpid()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child reports through the pipe)
        os.close(read)
        os.write(write, f"{current_pid()} {os.getpid()}".encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        seen, real = pipe.read().split()
    os.waitpid(child, 0)
    assert seen == real == str(child)
    assert current_pid() == os.getpid() != child
