"""`make site-check`: open the built site in headless Chromium with no network.

Serves site/ on 127.0.0.1 and opens a few pages in Chromium, which can reach nothing
else: host names do not resolve and every other request goes to a proxy here that
refuses it. The browser is driven over the Chrome DevTools Protocol on a pipe
(--remote-debugging-pipe: JSON messages ending in NUL on file descriptors 3 and 4),
which reports each page's requests (its workers' too), console errors and uncaught
exceptions, and lets us look inside the closed shadow root where mkdocs-material puts
a Mermaid diagram's SVG. (Chromium itself also calls Google services at start-up; the
proxy refuses those, and they are not counted against the page.)

A page fails if it logs a JavaScript error, if it requests anything off localhost, or
if fewer of its Mermaid diagrams became SVGs than its source has (every page with a
```mermaid fence is opened). Not part of `make test`:
CI has no browser.

    python tools/site_check.py [--site site] [--chromium /usr/bin/chromium]
"""

import argparse
import fcntl
import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

# (path under the site, number of Mermaid diagrams that must render as SVG): a chapter
# and a notebook page with none, and every page whose source has a diagram (diagrams)
PAGES = [("02_decompositions/", 0), ("exercises/ex01_lowering/", 0)]
CHAPTERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chapters")


def diagrams(chapters: str = CHAPTERS) -> list[tuple[str, int]]:
    """Each page of the book with Mermaid fences in its source, and how many."""
    found = []
    for name in sorted(os.listdir(chapters)):
        if not name.endswith(".md"):
            continue
        with open(os.path.join(chapters, name), encoding="utf-8") as f:
            count = sum(line.strip() == "```mermaid" for line in f)
        if count:
            page = "" if name == "index.md" else name[: -len(".md")] + "/"
            found.append((page, count))
    return found


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class RefusingProxy(http.server.BaseHTTPRequestHandler):
    """Chromium sends every request not for localhost here; all are refused."""

    def refuse(self):
        self.send_error(403, "site-check: no network")

    do_GET = do_POST = do_HEAD = do_PUT = do_OPTIONS = do_CONNECT = refuse

    def log_message(self, *args):
        pass


class Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # a browser that closes a connection early is no failure of the site


def serve(handler) -> http.server.ThreadingHTTPServer:
    server = Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class Chromium:
    """A headless Chromium and a minimal CDP client over --remote-debugging-pipe."""

    def __init__(self, binary: str, proxy_port: int):
        self.profile = tempfile.mkdtemp(prefix="site-check-")

        def high(fd):  # a copy numbered >= 10: moving pipes onto fds 3, 4 clobbers none
            copy = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
            os.close(fd)
            return copy

        to_browser, self.to_browser = map(high, os.pipe())
        self.from_browser, from_browser_w = map(high, os.pipe())
        flags = [
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--disable-extensions",
            f"--user-data-dir={self.profile}", "--remote-debugging-pipe",
            f"--proxy-server=http://127.0.0.1:{proxy_port}",
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
        ]  # fmt: skip

        def fds_3_and_4():
            os.dup2(to_browser, 3)
            os.dup2(from_browser_w, 4)

        self.proc = subprocess.Popen(
            [binary, *flags, "about:blank"], pass_fds=(3, 4), preexec_fn=fds_3_and_4,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(to_browser)
        os.close(from_browser_w)
        self.buffer, self.next_id, self.events = b"", 0, []

    def send(self, method: str, session: str | None = None, **params) -> dict:
        """Send a command and read messages until its reply; keep the events seen."""
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self.buffer:
                chunk = os.read(self.from_browser, 1 << 16)
                if not chunk:
                    raise RuntimeError("Chromium closed the DevTools pipe")
                self.buffer += chunk
            raw, self.buffer = self.buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def close(self):
        self.proc.kill()
        self.proc.wait()
        os.close(self.to_browser)
        os.close(self.from_browser)
        shutil.rmtree(self.profile, ignore_errors=True)


LOCAL = ("http://127.0.0.1:", "http://localhost:", "data:", "blob:", "about:")


def findings(events: list[dict], sessions: set[str]) -> tuple[list[str], list[str]]:
    """(JavaScript errors, off-localhost requests) in the events of these sessions."""
    errors, requests = [], []
    for e in events:
        method, p = e.get("method"), e.get("params", {})
        if e.get("sessionId") not in sessions:
            continue
        if method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            errors.append(d.get("exception", {}).get("description") or d["text"])
        elif method == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
            args = (a.get("value", a.get("description")) for a in p["args"])
            errors.append(" ".join(map(str, args)))
        elif method == "Log.entryAdded" and p["entry"]["level"] == "error":
            errors.append(f"{p['entry']['text']} {p['entry'].get('url', '')}".strip())
        elif method == "Network.requestWillBeSent":
            if not p["request"]["url"].startswith(LOCAL):
                requests.append(p["request"]["url"])
    return [line.splitlines()[0][:160] for line in errors], requests


def mermaid_svgs(node: dict) -> int:
    """Mermaid containers (class "mermaid") whose shadow root holds an <svg>."""

    def has_svg(n):
        return n.get("nodeName", "").lower() == "svg" or any(
            has_svg(c) for c in n.get("children", []) + n.get("shadowRoots", [])
        )

    attrs = dict(zip(node.get("attributes", [])[::2], node.get("attributes", [])[1::2]))
    here = "mermaid" in attrs.get("class", "").split() and any(
        has_svg(r) for r in node.get("shadowRoots", [])
    )
    kids = node.get("children", []) + node.get("shadowRoots", [])
    return here + sum(mermaid_svgs(c) for c in kids)


def watch(browser: Chromium, session: str) -> None:
    """Report this target's errors and requests, and attach to workers it starts."""
    for domain in ("Runtime", "Log", "Network"):
        browser.send(f"{domain}.enable", session)
    # workers start paused, so none of their requests is missed
    browser.send("Target.setAutoAttach", session, autoAttach=True,
                 waitForDebuggerOnStart=True, flatten=True)  # fmt: skip


def check_page(browser: Chromium, url: str, diagrams: int, timeout: float):
    """(Mermaid SVGs, JavaScript errors, off-localhost requests) of one page."""
    target = browser.send("Target.createTarget", url="about:blank")["targetId"]
    session = browser.send("Target.attachToTarget", targetId=target, flatten=True)
    sessions = {session["sessionId"]}
    page = session["sessionId"]
    watch(browser, page)
    browser.send("DOM.enable", page)
    browser.events.clear()
    browser.send("Page.navigate", page, url=url)
    deadline, settle, svgs, seen = time.monotonic() + timeout, None, 0, 0
    while time.monotonic() < (settle or deadline):
        time.sleep(0.25)
        while seen < len(browser.events):  # a worker started: watch it, let it run
            e, seen = browser.events[seen], seen + 1
            if e.get("method") == "Target.attachedToTarget":
                sessions.add(worker := e["params"]["sessionId"])
                watch(browser, worker)
                browser.send("Runtime.runIfWaitingForDebugger", worker)
        state = browser.send("Runtime.evaluate", page, expression="document.readyState")
        if settle or state["result"].get("value") != "complete":
            continue
        if diagrams:
            root = browser.send("DOM.getDocument", page, depth=-1, pierce=True)["root"]
            svgs = mermaid_svgs(root)
        if svgs >= diagrams:
            settle = time.monotonic() + 1.5  # let late scripts (search worker) run
    browser.send("Target.closeTarget", targetId=target)
    return (svgs, *findings(browser.events, sessions))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", default="site")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()
    if not os.path.isfile(os.path.join(args.site, "index.html")):
        sys.exit(f"site-check: no {args.site}/index.html; run `mkdocs build` first")
    if not shutil.which(args.chromium):
        sys.exit(f"site-check: no Chromium at {args.chromium!r}; pass --chromium PATH")
    site = serve(functools.partial(Quiet, directory=args.site))
    proxy = serve(RefusingProxy)
    browser = Chromium(args.chromium, proxy.server_address[1])
    failed = False
    print(f"{'page':28} {'mermaid':9} {'js errors':9} {'off-host':9} result")
    try:
        for path, wanted in diagrams() + PAGES:
            url = f"http://127.0.0.1:{site.server_address[1]}/{path}"
            svgs, errors, requests = check_page(browser, url, wanted, args.timeout)
            ok = svgs >= wanted and not errors and not requests
            failed |= not ok
            print(f"/{path:27} {f'{svgs}/{wanted} SVG':9} {len(errors):<9} "
                  f"{len(requests):<9} {'ok' if ok else 'FAIL'}")  # fmt: skip
            for error in errors:
                print(f"    js error: {error}")
            for request in requests:
                print(f"    off-host: {request}")
    finally:
        browser.close()
        site.shutdown()
        proxy.shutdown()
    print("site-check:", "FAILED" if failed else "passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
