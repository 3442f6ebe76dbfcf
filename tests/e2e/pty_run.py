#!/usr/bin/env python3
"""Run a command on a pseudo-terminal of a given size, as a user's
terminal would: stdout and stderr both on the terminal; everything the
command wrote, control codes included, is saved to OUT.

usage: pty_run.py COLUMNS OUT COMMAND [ARG...]   (exits with the command's status)
"""
import fcntl
import os
import pty
import struct
import sys
import termios

cols, out, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
pid, fd = pty.fork()
if pid == 0:
    # the size before the command asks; output as written (no "\n" -> "\r\n")
    fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 50, cols, 0, 0))
    attrs = termios.tcgetattr(0)
    attrs[1] &= ~termios.OPOST
    termios.tcsetattr(0, termios.TCSANOW, attrs)
    os.execvp(argv[0], argv)
data = bytearray()
while True:
    try:
        chunk = os.read(fd, 65536)
    except OSError:  # EIO: the command closed its terminal
        break
    if not chunk:
        break
    data += chunk
_, status = os.waitpid(pid, 0)
with open(out, "wb") as f:
    f.write(bytes(data))
sys.exit(os.waitstatus_to_exitcode(status))
