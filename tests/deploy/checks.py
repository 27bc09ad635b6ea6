"""The deployment tests' shared check list: one "ok"/"FAIL" line per check as it runs, and the
"N passed, N failed" line (and exit status) they all end with."""
import sys


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = []

    def check(self, ok, what, detail=""):
        line = f"{'ok  ' if ok else 'FAIL'} {what}" + (f": {detail}" if detail else "")
        print(line, flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed.append(line)
        return ok

    def finish(self):
        print(f"{self.passed} passed, {len(self.failed)} failed")
        sys.exit(1 if self.failed else 0)
