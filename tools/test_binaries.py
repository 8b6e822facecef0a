"""Copies the test executables named in cargo's JSON messages (stdin) into a folder.

    cargo test --no-run --message-format=json-render-diagnostics | python3 tools/test_binaries.py DEST

Each goes to DEST/<target name> (the library's unit tests under the crate's name), so a script
can run them by name on a machine without Rust. Compiler messages stay on the terminal.
"""

import json
import shutil
import sys

dest = sys.argv[1]
for line in sys.stdin:
    message = json.loads(line)
    if (
        message.get("reason") == "compiler-artifact"
        and message.get("executable")
        and message["profile"]["test"]
    ):
        shutil.copy(message["executable"], f"{dest}/{message['target']['name']}")
