"""A stand-in server for fleet tests: a tiny HTTP server a local or Ray launcher can start."""

from __future__ import annotations

# A stand-in engine: answers every GET with its CUDA_VISIBLE_DEVICES and arguments; `--exit-after S` makes
# it die S seconds after it starts (a crashing server).
ENV_SERVER = """
import http.server, json, os, sys, threading
args = sys.argv[3:]
if "--exit-after" in args:
    threading.Timer(float(args[args.index("--exit-after") + 1]), lambda: os._exit(3)).start()
print("env server starting", flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"cvd": os.environ.get("CUDA_VISIBLE_DEVICES"), "args": args,
                           "marker": os.environ.get("MARKER")}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), H).serve_forever()
"""
