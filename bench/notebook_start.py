"""notebook_start: ``tony notebook`` -> JupyterLab answering through the URL it printed, on the Hadoop
mini cluster, against the same JupyterLab started by hand in a bare skein container.

What a user waits for is the time from typing the command until the page the URL opens answers.

* runtime: ``tony --backend yarn notebook`` as a new process (the user's skein driver kept by a
  first, unmeasured command, as it is for every command after a user's first), until the URL it
  prints answers 200 for JupyterLab's page through the server the command runs (sign-in
  redirect included).
* floor: a bare skein application of one service whose container runs JupyterLab (``python -m
  jupyterlab``, the same interpreter and the same arguments the runtime's lab passes, its token in
  its environment), until its status answers 200, asked directly: nothing of this project in it.

Both run on the same mini cluster, whose nodes run this machine's interpreter (nothing shipped
either way: ``tony.yarn.python``), alternately, after one unmeasured warm-up of each; the ratio
is the median of the back-to-back pairs' ratios. Goal: <= 1.3 x the floor.
"""
from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import time
import urllib.request

import common
from common import log, median, rnd

GOAL = 1.3


def _answers(url: str, headers: dict[str, str] | None = None) -> bool:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def floor(client) -> dict:
    import skein

    from tony_workflow.web.boards import free_port
    port = free_port(0)
    token = secrets.token_hex(16)
    base = "/bench/notebook/"
    lab = (f"exec {sys.executable} -m jupyterlab --no-browser --ServerApp.ip=0.0.0.0 --ServerApp.port={port} "
           f"--ServerApp.port_retries=0 --ServerApp.base_url={base} --ServerApp.root_dir=. "
           "--ServerApp.allow_remote_access=True --LabApp.news_url=None "
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"
           + (" --allow-root" if os.geteuid() == 0 else ""))
    spec = skein.ApplicationSpec(
        name="bench-notebook-floor", queue="default", max_attempts=1,
        services={"lab": skein.Service(resources=skein.Resources(memory=1024, vcores=1), script=lab,
                                       env={"JUPYTER_TOKEN": token})})
    t0 = time.time()
    app_id = client.submit(spec)
    try:
        common.wait_for(lambda: _answers(f"http://127.0.0.1:{port}{base}api/status",
                                         {"Authorization": f"token {token}"}), timeout=300, interval=0.1,
                        what="the bare JupyterLab answering")
        seconds = time.time() - t0
    finally:
        client.kill_application(app_id)
    return {"app_id": app_id, "seconds": rnd(seconds)}


def runtime(env: dict[str, str]) -> dict:
    t0 = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "tony_workflow.client.cli", "--backend", "yarn", "notebook",
                             "--memory", "1g", "--idle-timeout", "0", "--conf", f"tony.yarn.python={sys.executable}",
                             "--conf", "tony.task.tensorboard.enabled=false"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=common.REPO, env=env)
    app_id = None
    try:
        url = proc.stdout.readline().strip() if proc.stdout else ""
        printed = time.time() - t0
        found = re.findall(r"/jobs/(application_\w+)/notebook/lab\?token=", url)
        if not found:
            raise RuntimeError(f"tony notebook printed no URL: {proc.stderr.read()[-2000:] if proc.stderr else ''}")
        app_id = found[0]
        import requests
        browser = requests.Session()  # keeps the sign-in cookie, as a browser does

        def page() -> bool:
            try:
                return browser.get(url, timeout=10).status_code == 200
            except requests.RequestException:
                return False
        common.wait_for(page, timeout=120, interval=0.1, what="the notebook's URL answering")
        seconds = time.time() - t0
    finally:
        if app_id:
            subprocess.run([sys.executable, "-m", "tony_workflow.client.cli", "--backend", "yarn", "kill", app_id],
                           capture_output=True, env=env, cwd=common.REPO, timeout=120, check=False)
        proc.terminate()
        proc.wait(60)
    return {"app_id": app_id, "seconds": rnd(seconds), "url_printed_s": rnd(printed)}


def main() -> int:
    ap = common.parser("notebook_start", __doc__)
    ap.add_argument("--reps", type=int, default=None, help="alternating pairs (default 5; --quick 1)")
    ap.add_argument("--minicluster", default=None, help="reuse the mini cluster running in this directory")
    args = ap.parse_args()
    reps = args.reps or (1 if args.quick else 5)
    host = common.host_info()
    metric = "tony notebook -> JupyterLab answering through its URL (mini cluster)"
    if common.skipped_without_minicluster(args, "notebook_start", metric, host):
        return 0
    from tony_workflow.client import TonyClient
    with common.minicluster(args.minicluster, isolated=False), common.tony_home("tony-bench-nb-") as home:
        env = {**os.environ, "TONY_HOME": str(home)}
        client = TonyClient("yarn").backend.client
        log("warm-up (not measured)")
        runtime(env)
        floor(client)
        pairs = []
        for i in range(reps):
            f, r = floor(client), runtime(env)
            pairs.append({"floor": f, "runtime": r, "ratio": rnd(r["seconds"] / f["seconds"])})
            log(f"pair {i + 1}/{reps}: floor {f['seconds']} s, tony notebook {r['seconds']} s "
                f"(URL printed at {r['url_printed_s']} s)")
        ratio = median([p["ratio"] for p in pairs])
        result = {"metric": metric, "unit": "s", "value": median([p["runtime"]["seconds"] for p in pairs]),
                  "floor": median([p["floor"]["seconds"] for p in pairs]), "ratio": rnd(ratio),
                  "goal": f"<= {GOAL} x floor", "goal_met": ratio is not None and ratio <= GOAL, "pairs": pairs}
    common.write_result(args, "notebook_start", result, host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
