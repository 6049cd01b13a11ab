#!/usr/bin/env bash
# free-port.sh: print a TCP port on the loopback that nothing listens on now.
exec python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
