"""A MariaDB server of one test module's own: a fresh datadir under a
temporary directory, a free port, and a user with the privileges the job
service needs and no more (without READ ONLY ADMIN, so ``read_only``
applies to it, as it does to an application's user). A test may make it
read-only; the shared servers of scripts/services are never touched.
Every step is bounded in time, and ``stop`` ends the server it started."""

from __future__ import annotations

import contextlib
import getpass
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pymysql

from tests.servers import restartable_port

USER, PASSWORD = "pinlater_private", "private-pw-3e1a"
GRANTS = "SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX, LOCK TABLES, CREATE TEMPORARY TABLES"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


def _command(*names: str) -> str:
    for name in names:
        found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/local/sbin")
        if found:
            return found
    raise RuntimeError(f"none of {names} is installed (scripts/services up installs MariaDB)")


class PrivateMariaDB:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.port = restartable_port()
        self.socket = directory / "mysqld.sock"
        self._process: subprocess.Popen[bytes] | None = None

    def url(self, database: str) -> str:
        return f"mysql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        data, tmp, log = self.dir / "data", self.dir / "tmp", self.dir / "mysqld.log"
        tmp.mkdir(parents=True, exist_ok=True)
        user = getpass.getuser()
        installed = subprocess.run(
            [_command("mariadb-install-db", "mysql_install_db"), "--no-defaults", f"--datadir={data}",
             f"--user={user}", "--auth-root-authentication-method=normal", "--skip-test-db",
             "--skip-name-resolve"],
            capture_output=True, text=True, timeout=START_TIMEOUT_S,
        )
        if installed.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed:\n{installed.stdout}\n{installed.stderr}")
        self._process = subprocess.Popen(
            [_command("mariadbd", "mysqld"), "--no-defaults", f"--datadir={data}", f"--port={self.port}",
             "--bind-address=127.0.0.1", f"--socket={self.socket}", f"--tmpdir={tmp}", f"--log-error={log}",
             f"--pid-file={self.dir / 'mysqld.pid'}", f"--user={user}", "--skip-name-resolve",
             "--skip-log-bin", "--innodb-buffer-pool-size=16M", "--innodb-log-file-size=8M",
             "--character-set-server=utf8mb4", "--collation-server=utf8mb4_general_ci"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C of the test run reaches it through stop() only
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                self.root(f"CREATE USER IF NOT EXISTS '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'",
                          f"GRANT {GRANTS} ON *.* TO '{USER}'@'127.0.0.1'")
                return
            except pymysql.err.OperationalError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
                    raise RuntimeError(f"private MariaDB did not start:\n{tail}") from None
                time.sleep(0.2)

    def root(self, *statements: str) -> list[Any]:
        """Runs statements as root over the server's own socket; the last one's rows."""
        conn = pymysql.connect(unix_socket=str(self.socket), user="root", autocommit=True, connect_timeout=5)
        try:
            with conn.cursor() as cur:
                for statement in statements:
                    cur.execute(statement)
                return list(cur.fetchall())
        finally:
            conn.close()

    def read_only(self, on: bool) -> None:
        self.root(f"SET GLOBAL read_only = {int(on)}")

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)  # a clean shutdown
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=STOP_TIMEOUT_S)
