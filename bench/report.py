"""Writes docs/benchmarks.md and its plots from the result files in bench/results.

    python bench/report.py [--results DIR] [--doc docs/benchmarks.md]

The table and the plots come from whatever result files are there (a ``--quick`` result is
marked as such). The analysis is written by hand in the document itself, from its ``## Analysis``
heading on, and kept as it is when the rest is written again.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
ORDER = ["launch", "recovery", "throughput", "throughput_ddp", "am_scale", "yarn_submit", "rm_load", "follow_many", "chaos",
         "chaos_yarn", "history_server", "gang_packing", "gang_packing_yarn", "elastic", "elastic_yarn", "data_input",
         "output_follow", "output_follow_yarn", "airflow_log", "notebook_start"]


def load(results: Path) -> dict[str, dict]:
    out = {}
    for name in ORDER:
        p = results / f"{name}.json"
        if p.exists():
            out[name] = json.loads(p.read_text())
    return out


def rnd_(x: float, nd: int = 2) -> float:
    return round(x, nd)


def fmt(x, unit: str = "") -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        s = f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"
    else:
        s = str(x)
    return f"{s} {unit}".strip()


# ------------------------------------------------------------------ plots

def plots(res: dict[str, dict], out: Path) -> dict[str, Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    made: dict[str, Path] = {}

    def save(fig, name):
        path = out / f"{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made[name] = path

    if "launch" in res:
        r = res["launch"]
        rows = r["rows"]
        fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
        xs = range(len(rows))
        a.bar([x - 0.2 for x in xs], [row["floor"] for row in rows], 0.4, label="floor: spawned directly")
        a.bar([x + 0.2 for x in xs], [row["value"] for row in rows], 0.4, label="runtime: submit")
        a.set_xticks(list(xs), [f"N={row['n']}" for row in rows])
        a.set_ylabel("seconds to all N user processes started")
        a.set_title("launch (median of runs)")
        for x, row in zip(xs, rows):
            a.annotate(f"{row['ratio']}x", (x + 0.2, row["value"]), ha="center", va="bottom", fontsize=8)
        a.legend()
        row = next((row for row in rows if row["n"] == 16), rows[-1])
        phases = [(k, v) for k, v in row["phases_median_run"].items() if v is not None and k != "submit_returned"]
        phases.sort(key=lambda kv: kv[1])
        b.barh([k for k, _ in phases], [v for _, v in phases], color="tab:orange")
        b.axvline(row["floor"], color="tab:blue", ls="--", label=f"floor {row['floor']} s")
        b.axvline(row["floor"] * 1.5, color="red", ls=":", label="goal 1.5 x floor")
        b.set_xlabel(f"seconds after submit (N={row['n']})")
        b.set_title("where the time goes (AM event log)")
        b.invert_yaxis()
        b.legend(fontsize=8)
        save(fig, "launch")

    if "recovery" in res:
        r = res["recovery"]
        fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
        cases = []
        s = r["session_relaunch"]
        med = sorted(s, key=lambda x: x["total_s"])[len(s) // 2]
        cases.append(("session relaunch\n(local)", med.get("detect_s", 0), med.get("teardown_s", 0), med["spawn_s"]))
        t = r["task_relaunch"]
        medt = sorted(t, key=lambda x: x["total_s"])[len(t) // 2]
        cases.append(("task relaunch\n(local)", medt["detect_s"], medt["total_s"] - medt["detect_s"] - medt["spawn_s"],
                      medt["spawn_s"]))
        y = r.get("yarn_session_relaunch") or {}
        if "total_s" in y:
            cases.append(("session relaunch\n(mini cluster)", y["detect_s"], y["overhead_s"] - y["detect_s"],
                          y["spawn_s"]))
        names = [c[0] for c in cases]
        d = [c[1] for c in cases]
        td = [c[2] for c in cases]
        sp = [c[3] for c in cases]
        a.bar(names, d, label="detect")
        a.bar(names, td, bottom=d, label="teardown / restart")
        a.bar(names, sp, bottom=[x + y for x, y in zip(d, td)], label="spawn (floor)")
        a.set_ylabel("seconds from kill -9 to all running")
        a.set_title("recovery")
        a.legend(fontsize=8)
        hangs = [("defaults\n(timeout 8 s)", r["hang_default"]),
                 ("TonY's rule\n(1 s x 25)", r.get("hang_tony_rule") or r.get("hang_tuned") or {})]
        vals = [h.get("detect_s") or 0 for _, h in hangs]
        b.bar([n for n, _ in hangs], vals, color=["tab:red" if v >= 10 else "tab:green" for v in vals])
        b.axhline(10, color="black", ls=":", label="goal < 10 s")
        b.set_ylabel("seconds from SIGSTOP to LOST")
        b.set_title("hung task detection (local)")
        b.legend(fontsize=8)
        save(fig, "recovery")

    if "throughput" in res:
        r = res["throughput"]
        fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))
        groups = [("by hand", r["by_hand"]), ("runtime", r["runtime"])]
        if r.get("runtime_no_tensorboard"):
            groups.append(("runtime,\nno TensorBoard", r["runtime_no_tensorboard"]))
        for gi, (name, runs) in enumerate(groups):
            vals = [x["steps_per_s"] for x in runs]
            a.scatter([gi] * len(vals), vals, zorder=3)
            a.bar(gi, sorted(vals)[len(vals) // 2], alpha=0.4)
        a.set_xticks(range(len(groups)), [g[0] for g in groups])
        a.set_ylabel("steps/s (worker 0)")
        a.set_title(f"MWMS example throughput: ratio {r['ratio']} (goal >= 0.98)")
        colors = {"by hand": "tab:blue", "runtime": "tab:orange", "runtime,\nno TensorBoard": "tab:green"}
        for name, runs in groups:
            for k, run in enumerate(runs):
                tl = run.get("timeline") or []
                b.plot([p[0] for p in tl], [p[1] for p in tl], color=colors[name], alpha=0.6, lw=1,
                       label=name.replace("\n", " ") if k == 0 else None)
        b.set_xlabel("seconds after the first logged step")
        b.set_ylabel("global step")
        b.set_title("every run's progress")
        b.legend(fontsize=8)
        save(fig, "throughput")

    if "am_scale" in res:
        r = res["am_scale"]
        runs = [("null server,\nhttp.server", r["null_server"])]
        if r.get("null_transport"):
            runs.append(("null server,\nAM's transport", r["null_transport"]))
        runs.append(("AM", r["am"]))
        fig, (a, b) = plt.subplots(1, 2, figsize=(13, 5))
        names = [n for n, _ in runs]
        colors = ["tab:blue" if "null" in n else "tab:orange" for n in names]
        a.bar(names, [x["spec_all_s"] or 0 for _, x in runs], color=colors)
        a.axhline(2.0, color="red", ls=":", label="goal < 2 s")
        a.set_ylabel("seconds until all hold the cluster spec")
        a.set_title(f"{r['params']['n']} simulated executors: registration")
        a.tick_params(axis="x", labelsize=7)
        a.legend(fontsize=8)
        b.bar(names, [100 * (x["steady_cpu_share"] or 0) for _, x in runs], color=colors)
        b.axhline(25, color="red", ls=":", label="goal < 25 %")
        b.set_ylabel("% of one core, steady heartbeats")
        b.set_title(f"server CPU at {r['params']['n']} heartbeats/s")
        b.tick_params(axis="x", labelsize=7)
        b.legend(fontsize=8)
        save(fig, "am_scale")

    if "yarn_submit" in res and res["yarn_submit"].get("skein_runs"):
        r = res["yarn_submit"]
        fig, a = plt.subplots(figsize=(8, 4))
        k = len(r["skein_runs"])
        xs = range(k)
        a.bar([x - 0.2 for x in xs], [x["seconds"] for x in r["skein_runs"]], 0.4,
              label="bare skein: the command running in every container")
        a.bar([x + 0.2 for x in xs], [x["seconds"] for x in r["tony_runs"]], 0.4,
              label="tony: the command running in every task container")
        a.set_xticks(list(xs), [f"pair {i + 1}" for i in xs])
        a.set_ylabel("seconds after submit")
        a.set_title(f"mini cluster submit, {r['params'].get('workers', '?')} workers: ratio {r['ratio']} (goal <= 1.3)")
        a.legend(fontsize=8)
        save(fig, "yarn_submit")

    if "follow_many" in res and res["follow_many"].get("runtime"):
        r = res["follow_many"]
        runs = [("floor: RM REST\nreport only", r["floor_run"]), ("runtime:\nJobHandle.status()", r["runtime"])]
        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
        a.bar([n for n, _ in runs], [100 * x["cpu_share"] for _, x in runs], color=["tab:blue", "tab:orange"])
        a.axhline(100 * 0.05, color="red", ls=":", label="goal <= 5 %")
        a.set_ylabel("% of one core")
        a.set_title(f"following {r['params']['n']} jobs, a read every {r['params']['poll_s']:g} s each")
        a.legend(fontsize=8)
        b.bar([n for n, _ in runs], [x["mb_per_job"] for _, x in runs], color=["tab:blue", "tab:orange"])
        b.axhline(5, color="red", ls=":", label="goal <= 5 MB")
        b.set_ylabel("MB of memory per followed job")
        b.set_title(f"JVMs started: floor {runs[0][1]['jvms']}, runtime {runs[1][1]['jvms']}")
        b.legend(fontsize=8)
        save(fig, "follow_many")

    if "chaos" in res:
        r = res["chaos"]
        fig, a = plt.subplots(figsize=(7, 4.5))
        for ex, marker in (("mwms", "o"), ("ps", "s")):
            rows = [x for x in r["rows"] if x["example"] == ex and x.get("restart_start_step") is not None]
            a.scatter([x["checkpoint_step"] for x in rows], [x["restart_start_step"] for x in rows], marker=marker,
                      label=f"{ex}: session relaunched", zorder=3)
            inplace = [x for x in r["rows"] if x["example"] == ex and x.get("restart_start_step") is None
                       and x.get("checkpoint_step") is not None]
            if inplace:
                steps = [x["checkpoint_step"] for x in inplace]
                a.scatter(steps, steps, marker=marker,
                          facecolors="none", edgecolors="gray", label=f"{ex}: task relaunched in place")
        top = max([x.get("checkpoint_step") or 0 for x in r["rows"]] + [10])
        a.plot([0, top], [0, top], "k:", label="start_step = checkpoint at the kill")
        a.set_xlabel("last checkpoint step at the kill")
        a.set_ylabel("start_step after the restart")
        a.set_title(f"chaos: {r['value']}/{r['trials']} SUCCEEDED, max steps lost {r['max_steps_lost']}")
        a.legend(fontsize=7)
        save(fig, "chaos")
    return made


# ------------------------------------------------------------------ the document

def summary_table(res: dict[str, dict]) -> list[str]:
    lines = ["| benchmark | metric | value | floor | ratio | goal | met | run |",
             "|---|---|---|---|---|---|---|---|"]
    for name in ORDER:
        r = res.get(name)
        if r is None:
            lines.append(f"| {name} | not run | | | | | | |")
            continue
        unit = r.get("unit") or ""
        run = f"{r['when'][:16].replace('T', ' ')}{' (quick)' if r.get('quick') else ''}"
        commit = r.get("host", {}).get("runtime_commit")
        if commit:
            run += f", runtime {commit}{' (modified)' if r['host'].get('runtime_modified') else ''}"
        met = "**yes**" if r["goal_met"] else "**no**"
        part = goal_parts(name, r)
        if part:
            met += f" ({part})"
        if r.get("skipped"):
            met = f"skipped: {r['skipped']}"
        lines.append(f"| {name} | {r['metric']} | {fmt(r['value'], unit)} | {fmt(r['floor'], unit)} | "
                     f"{fmt(r['ratio'])} | {r['goal']} | {met} | {run} |")
    return lines


def goal_parts(name: str, r: dict) -> str:
    """Which half of a two-part goal holds."""
    yn = lambda ok: "yes" if ok else "no"
    if name == "recovery" and "summary" in r:
        s = r["summary"]
        return (f"relaunch {yn(s['relaunch_goal_met'])}; hang {yn(s['hang_goal_met'])}, "
                f"{s['hang_detect_default_s']} s")
    if name == "am_scale" and "am" in r:
        spec, cpu = r["am"]["spec_all_s"], r["am"]["steady_cpu_share"]
        return (f"spec {yn(spec is not None and spec < 2.0)}; CPU {yn(cpu < 0.25)}, {round(100 * cpu)} %")
    if name == "follow_many" and "runtime" in r:
        return f"{r['jvms']} JVM, {r['mb_per_job']} MB per job, {round(100 * r['value'], 1)} % of a core"
    if name == "history_server" and "runtime" in r:
        return f"worst warm page {r['worst_warm_ms']} ms"
    if name == "data_input" and "goals" in r:
        return "; ".join(f"{goal} {yn(ok)}" for goal, ok in r["goals"].items())
    if name == "rm_load" and "rows" in r:
        return f"{r['requests_per_s']} requests/s, {round(r['value'] / 1024)} KB/s per queue"
    if name.startswith("gang_packing") and "rows" in r:
        return (f"worst {r['ratio_worst']} x ideal; {r['deadlocks']} deadlocks in {len(r['rows'])}; "
                f"at most {r['max_places_late']} places late")
    if name.startswith("chaos") and "rows" in r:
        return (f"{r['value']}/{r['trials']} SUCCEEDED; {r['trials_with_loss']} lost steps, at most "
                f"{r['max_steps_lost']}; {r.get('processes_left', 'n/a')} processes left")
    return ""


def details(name: str, r: dict) -> list[str]:
    out: list[str] = []
    if name == "launch":
        out += ["| N | floor (s) | runtime (s) | ratio | runtime runs (s) |", "|---|---|---|---|---|"]
        out += [(f"| {row['n']} | {row['floor']} | {row['value']} | {row['ratio']} | "
                 f"{', '.join(map(str, row['runtime_runs']))} |") for row in r["rows"]]
        row = next((row for row in r["rows"] if row["n"] == 16), r["rows"][-1])
        out += ["", f"Phases of the median N={row['n']} run, seconds after submit: " +
                ", ".join(f"{k} {v}" for k, v in row["phases_median_run"].items() if v is not None) + "."]
        am = r.get("am_process_floor")
        if am:
            out += ["", ("A Python process started and listening on a port, timed from `Popen` to a successful "
                         f"connect (medians): bare socket {am['bare_listener']} s, with `http.server` "
                         f"{am['http_server']} s, with `http.server` and the AM's imports "
                         f"{am['http_server_with_am_imports']} s.")]
    elif name == "recovery":
        s = r["summary"]
        out += ["| case | total (s) | of which spawn (s) |", "|---|---|---|",
                f"| session relaunch, local | {s['session_relaunch_total_s']} | {s['session_relaunch_spawn_s']} |",
                f"| task relaunch, local | {s['task_relaunch_total_s']} | {s['task_relaunch_spawn_s']} |"]
        y = r.get("yarn_session_relaunch") or {}
        if "total_s" in y:
            out.append(f"| session relaunch, mini cluster | {y['total_s']} | {y['spawn_s']} |")
        elif y:
            out.append(f"| session relaunch, mini cluster | {y.get('skipped') or y.get('error')} | |")
        out += ["", "| hang | detected after (s) |", "|---|---|",
                ("| whole container stopped, defaults (heartbeat-timeout-ms 8000) | "
                 f"{r['hang_default'].get('detect_s')} |"),
                ("| whole container stopped, TonY's rule alone (1000 ms x 25 missed) | "
                 f"{(r.get('hang_tony_rule') or {}).get('detect_s')} |")]
        u = r.get("hang_user_process_only")
        if u:
            detected = u.get("detect_s") if u.get("detected") else f"not detected in {u.get('watched_s')} s"
            out.append(f"| user process alone stopped, defaults | {detected} |")
    elif name.startswith("throughput"):
        if r.get("pair_ratios"):
            out += [(f"Ratios of the back-to-back pairs: {', '.join(map(str, r['pair_ratios']))} (their median is "
                     f"the ratio above; the ratio of the medians is {r.get('ratio_of_medians')})."), ""]
        out += [(f"Task parameters `{r['params']['task_params']}`. By hand: "
                 f"{', '.join(str(x['steps_per_s']) for x in r['by_hand'])} steps/s; runtime: "
                 f"{', '.join(str(x['steps_per_s']) for x in r['runtime'])}.")]
        if r.get("runtime_no_tensorboard"):
            runs = ", ".join(str(x["steps_per_s"]) for x in r["runtime_no_tensorboard"])
            out[-1] += (f" Runtime without TensorBoard: {runs}"
                        f" (ratio {r['ratio_no_tensorboard']}).")
        if r.get("runtime_followed"):
            runs = ", ".join(str(rnd_(x["steps_per_s"])) for x in r["runtime_followed"])
            pairs = ", ".join(str(rnd_(f["steps_per_s"] / t["steps_per_s"], 3))
                              for t, f in zip(r["runtime"], r["runtime_followed"]))
            out[-1] += (f" Runtime with its chief's output followed: {runs} steps/s; followed / not followed by "
                        f"pairs: {pairs} (median {r['ratio_followed']}; {r.get('goal_followed')}: "
                        f"{'met' if r['ratio_followed'] >= 0.98 else 'MISSED'}).")
    elif name == "am_scale":
        runs = [("null gang server on http.server (floor)", r["null_server"])]
        if r.get("null_transport"):
            runs.append(("null gang server on the AM's transport", r["null_transport"]))
        runs.append(("ApplicationMaster", r["am"]))
        out += [("| server | all hold spec (s) | all registered (s) | client errors | CPU, burst | CPU, steady | "
                 "heartbeats/s | p99 heartbeat (ms) |"), "|---|---|---|---|---|---|---|---|"]
        for label, x in runs:
            out.append(f"| {label} | {x['spec_all_s']} | {x['registered_all_s']} | {x['errors']} | "
                       f"{fmt(100 * x['burst_cpu_share'])} % | {fmt(100 * x['steady_cpu_share'])} % | "
                       f"{x['heartbeats_per_s']} | {x['hb_latency_ms_p99']} |")
        if r.get("null_transport"):
            out += ["", (f"Steady CPU: the AM's transport costs {r['transport_cpu_ratio']} x http.server's, and "
                         f"the AM's logic adds {r['logic_cpu_ratio']} x on top of its transport.")]
    elif name == "yarn_submit" and r.get("skein_runs"):
        m = r.get("medians") or {}
        sk, tn = m.get("skein", {}), m.get("tony", {})
        out += ["| median (s after submit) | submit call returns | YARN says RUNNING | first command | every command |",
                "|---|---|---|---|---|",
                (f"| bare skein | {fmt(sk.get('submit_call_s'))} | {fmt(sk.get('yarn_running_s'))} | "
                 f"{fmt(sk.get('first_s'))} | {fmt(r['floor'])} |"),
                (f"| tony | {fmt(tn.get('submit_call_s'))} | {fmt(tn.get('yarn_running_s'))} | "
                 f"{fmt(tn.get('first_s'))} | {fmt(r['value'])} |"), "",
                (f"The job's AM started (its event log) {fmt(tn.get('am_started_s'), 's')} and had its gang "
                 f"{fmt(tn.get('gang_formed_s'), 's')} after the submit call. Gangs given back: "
                 f"{r.get('give_backs', 0)}; requests the ResourceManager lost: {r.get('lost_requests', 0)}. "
                 f"Ratios of the back-to-back pairs: {', '.join(map(str, r.get('pair_ratios') or []))}.")]
        ship = r.get("shipping")
        if ship:
            where = ("an isolated mini cluster: every job brings its runtime" if r["params"].get("isolated")
                     else "a mini cluster whose nodes have the project" if not ship.get("shipped")
                     else "a mini cluster, the runtime shipped")
            out += ["", (f"On {where}. What shipping costs: the first submission, with no runtime built on this "
                         f"machine nor cached in HDFS, took {ship['cold']['submit_call_s']} s to return and "
                         f"{ship['cold']['seconds']} s to every command running; the next one "
                         f"{ship['warm']['submit_call_s']} s and {ship['warm']['seconds']} s. The runtime archive "
                         f"is {ship['runtime_mb']} MB ({ship['distributions']} distributions).")]
        env = r.get("environment")
        if env:
            out += ["", (f"The job's environment, TensorFlow's ({env['distributions']} distributions, {env['mb']} MB): "
                         "seconds from submit to every command running (the submit call's share in brackets)."), "",
                    "| | first (nothing cached) | cached | one small distribution changed |", "|---|---|---|---|",
                    *(f"| {label} | {fmt(env[a]['seconds'])} ({fmt(env[a]['submit_call_s'])}) | "
                      + (f"{fmt(env[b]['seconds'])} ({fmt(env[b]['submit_call_s'])})" if b else "–")
                      + f" | {fmt(env[c]['seconds'])} ({fmt(env[c]['submit_call_s'])}) |"
                      for label, a, b, c in (("in parts (the runtime's way)", "parts_first", "parts_cached",
                                              "parts_one_changed"),
                                             ("one archive (cluster-pack's way)", "whole_first", None,
                                              "whole_one_changed"))),
                    "", (f"One changed over cached: {env['one_changed_over_cached']} (goal <= 1.2); cached over the "
                         f"job without an environment: {env['cached_over_no_environment']} (goal <= 1.1).")]
        cli = r.get("cold_cli")
        if cli:
            over = r.get("cold_cli_over_floor") or {}
            out += ["", ("A cold command line (`tony --backend yarn submit` in a new process) to every command "
                         f"running, median of {len(cli['kept_driver'].get('runs') or [1])}: with the driver a first "
                         f"command kept, {cli['kept_driver']['seconds']} s ({over.get('kept_driver')} x the floor; goal "
                         f"<= 1.3); starting skein's JVM itself, {cli['no_kept_driver']['seconds']} s "
                         f"({over.get('no_kept_driver')} x).")]
    elif name == "rm_load" and r.get("rows"):
        floors = {(f["scenario"], f["nodes"]): f for f in r.get("floors") or []}
        out += [("| waiting | nodes | jobs | queues | requests/s | KB/s | before: requests/s | before: KB/s |"),
                "|---|---|---|---|---|---|---|---|"]
        for x in r["rows"]:
            f = floors.get((x["scenario"], x["nodes"]))
            before = ("", "") if f is None or "mini" in x["way"] else (
                fmt(f["requests_per_s"] * x["jobs"] * x["queues"]), fmt(f["bytes_per_s"] * x["jobs"] * x["queues"] / 1024))
            where = " (mini cluster)" if "mini" in x["way"] else ""
            out.append(f"| {x['scenario']}{where} | {x['nodes']} | {x['jobs']} | {x['queues']} | "
                       f"{fmt(x['requests_per_s'])} | {fmt(x['bytes_per_s'] / 1024)} | {before[0]} | {before[1]} |")
        out += ["", ("Before: each job reading for itself, as before the queue's board (every TonY application, "
                     "the job's own report, the scheduler and every node every two seconds), measured with one job "
                     "per size and scaled to the jobs and queues of the row. The simulated ResourceManager answers "
                     "with shapes captured from a real Hadoop 3.5.0 one; the board is a local directory there, HDFS "
                     "on the mini cluster.")]
        if r.get("minicluster_error"):
            out += ["", f"The mini cluster part of this run did not complete: {r['minicluster_error']}."]
    elif name == "follow_many" and r.get("runtime"):
        out += ["| follower | JVMs | RSS after one job (MB) | after all (MB) | MB per job | CPU | reads |",
                "|---|---|---|---|---|---|---|"]
        for label, x in (("floor: ResourceManager REST only", r["floor_run"]), ("runtime: JobHandle.status()",
                                                                                 r["runtime"])):
            out.append(f"| {label} | {x['jvms']} | {x['rss_one_mb']} | {x['rss_all_mb']} | {x['mb_per_job']} | "
                       f"{fmt(100 * x['cpu_share'])} % | {x['polls']} in {x['window_s']} s |")
    elif name == "history_server" and r.get("runtime"):
        out += [(f"{r['jobs']} records ({r['fill_s']} s to write); the first list page after the start, which "
                 f"reads every record once: {r['first_list_after_start_ms']} ms."), "",
                "| page | runtime median (ms) | max (ms) | bytes | floor: the same bytes from http.server (ms) |",
                "|---|---|---|---|---|"]
        for page, x in r["runtime"].items():
            out.append(f"| {page} | {x['median_ms']} | {x['max_ms']} | {x['bytes']} | "
                       f"{r['floor_pages'][page]['median_ms']} |")
    elif name == "data_input" and r.get("one_rank"):
        d, one, a, t = r["dataset"], r["one_rank"], r["adapters"], r["training"]
        out += [(f"{d['rows']:,} rows ({round(d['bytes_on_disk'] / 2**20)} MB of Parquet on disk), batches of "
                 f"{d['batch']}."), "",
                "| measurement | runtime | floor | ratio |", "|---|---|---|---|",
                (f"| one rank, in order (rows/s) | {fmt(one['reader_rows_per_s'])} | pyarrow iter_batches "
                 f"{fmt(one['floor_rows_per_s'])} | {one['ratio']} |"),
                f"| one rank, shuffled (rows/s) | {fmt(one['shuffled_rows_per_s'])} | – | – |",
                (f"| tf.data from as_tf() (rows/s) | {fmt(a['tf']['rows_per_s'])} | the raw reader "
                 f"{fmt(a['tf']['raw_rows_per_s'])} | {a['tf']['ratio']} |"),
                (f"| torch loader(), in the training process (rows/s) | {fmt(a['torch']['rows_per_s'])} | the raw "
                 f"reader {fmt(a['torch']['raw_rows_per_s'])} | {a['torch']['ratio']} |")]
        if "torch_2_workers" in a:
            w = a["torch_2_workers"]
            out.append(f"| torch loader(num_workers=2) (rows/s) | {fmt(w['rows_per_s'])} | two workers handing out "
                       f"batches held in memory {fmt(w['floor_rows_per_s'])} | {w['ratio']} |")
        floor_name = "the example's in-memory pipeline" if "pair_ratios" in t else "in-memory arrays"
        out += [(f"| Keras fit on as_tf() (steps/s) | {fmt(t['reader_steps_per_s'])} | {floor_name} "
                 f"{fmt(t['floor_steps_per_s'])} | {t['ratio']} |")]
        h = r.get("hdfs") or {}
        if "ratio" in h:
            out.append(f"| one rank over WebHDFS, in order (rows/s) | {fmt(h['reader_rows_per_s'])} | pyarrow over "
                       f"fsspec's WebHDFS {fmt(h['floor_rows_per_s'])} | {h['ratio']} |")
        out.append("")
        if "pair_ratios" in t:
            out += [(f"Training: {t['pairs']} back-to-back pairs of fits of {t['steps_per_fit']} steps, the median of "
                     f"their ratios; the pairs' ratios were {', '.join(map(str, t['pair_ratios']))}."), ""]
        if "ratio" in h:
            def names(ops: dict) -> str:
                return ", ".join(f"{k} {v}" for k, v in ops.items())
            out += [(f"Over WebHDFS ({h['files']} files, {h['units']} units): planning took {h['plan_s']} s; the "
                     f"NameNode's own counts: planning {names(h['plan_namenode'])}; the reader's epoch "
                     f"{names(h['read_namenode'])} ({h['namenode_per_unit']['read']} a unit); pyarrow by hand "
                     f"{names(h['floor_namenode'])}."), ""]
        elif h.get("skipped"):
            out += [f"Over WebHDFS: not run ({h['skipped']}).", ""]
        out += [("Time to the first batch after a restore: " + ", ".join(f"{float(k) * 100:.0f} % {v} s"
                                                                           for k, v in r["resume_s"].items())
                 + f" (max/min {r['resume_spread']})."), "",
                "Ranks reading at once: " + ", ".join(f"{w} ranks {fmt(x['rows_per_s'])} rows/s (steps each "
                                                      f"{x['steps_each']})" for w, x in r["ranks"].items()) + "."]
    elif name.startswith("gang_packing") and r.get("rows"):
        room, jobs = r["params"]["room"], r["params"]["jobs"]
        if r.get("round_s"):  # the ideal is rounds of `room` jobs started side by side
            out += [(f"{room} jobs submitted at once to the empty cluster: {', '.join(map(str, r['round_s']))} s; "
                     f"one job alone: {', '.join(map(str, r['alone_s']))} s; ideal packing of {jobs} with room "
                     f"for {room} (a first round of {room} side by side, then each round as one job alone): "
                     f"{r['ideal_s']} s (against {jobs} x alone / {room} = {r['ideal_alone_s']} s, which takes the "
                     f"first round's starts on the same cores for the runtime's, the worst run is "
                     f"{r['ratio_alone_worst']} x). The same gang without the runtime, {room} at once: "
                     f"{', '.join(map(str, r['bare_round_s']))} s, one alone: {', '.join(map(str, r['bare_s']))} s; "
                     f"ideal packing from outside the runtime {r['ideal_outside_s']} s (median makespan "
                     f"{r['ratio_outside_median']} x it; a first round of the runtime's is {r['round_over_bare']} x "
                     f"the bare one, one job alone {r['alone_over_bare']} x)."), ""]
        else:
            out += [(f"One job alone: {', '.join(map(str, r['alone_s']))} s; ideal packing of {jobs} "
                     f"with room for {room}: {r['ideal_s']} s.")
                    + (f" The same gang without the runtime: {', '.join(map(str, r['bare_s']))} s; ideal packing "
                       f"from outside the runtime {r['ideal_outside_s']} s (median makespan "
                       f"{r['ratio_outside_median']} x it; one job alone is {r['alone_over_bare']} x the bare gang)."
                       if r.get("bare_s") else ""), ""]
        out += [("| run | makespan (s) | x ideal | SUCCEEDED | places late (by submission) | idle memory while "
                 "jobs waited (GB·s, share) | held while waiting (containers, MB) |"),
                "|---|---|---|---|---|---|---|"]
        for i, x in enumerate(r["rows"]):
            out.append(f"| {i + 1} | {x['makespan_s']} | {x['ratio']} | {x['succeeded']}"
                       f"{' (deadlock)' if x['deadlock'] else ''} | {', '.join(map(str, x['places_late']))} | "
                       f"{x['idle_gb_s_while_waiting']}, {round(100 * x['idle_share_while_waiting'])} % | "
                       f"{x['waiting_containers_max']}, {x['waiting_mb_max']} |")
        if r.get("handoff_median_s"):
            h, said = r["handoff_median_s"], r["handoff_said"]
            out += ["", (f"Where a hand-off goes ({r['handoffs']} hand-offs, medians, seconds from the end of the "
                         f"tasks of the job whose room the next takes to the start of the next one's tasks: "
                         f"{h['total']} s): ") + "; ".join(f"{step} {h[step]} ({said[step]})" for step in said) + "."]
    elif name.startswith("elastic") and r.get("runs"):
        out += [("| form | run | killed | wall, undisturbed (s) | wall, killed (s) | time lost (s) | no training (s) | "
                 "below full size (s) | steps lost | session after | state |"),
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        forms = [("elastic", "elastic", "elastic_floor"), ("elastic, rank 0's container", "elastic_rank0",
                                                           "elastic_floor"), ("relaunch", "relaunch", "relaunch_floor")]
        for label, form, floor in forms:
            for i, (k, f) in enumerate(zip(r["runs"].get(form) or [], r["runs"][floor], strict=False)):
                lost = None if k["wall_s"] is None or f["wall_s"] is None else round(k["wall_s"] - f["wall_s"], 2)
                out.append(f"| {label} | {i + 1} | {k.get('killed') or 'worker:1'} | {f['wall_s']} | {k['wall_s']} | "
                           f"{fmt(lost)} | {fmt(k.get('no_training_s'))} | {fmt(k.get('below_full_s'))} | "
                           f"{fmt(k.get('steps_lost'))} | {k['session']} | {k['state']} |")
        if r.get("elastic_rank0_lost_s_median") is not None:
            out += ["", (f"Rank 0's container killed: elastic loses {fmt(r['elastic_rank0_lost_s_median'], 's')}, "
                         f"at most {fmt(r.get('elastic_rank0_steps_lost_max'))} steps (saves every 5).")]
        out += ["", (f"Medians: elastic loses {fmt(r['elastic_lost_s_median'], 's')} "
                     f"(no training {fmt(r['elastic_no_training_s_median'], 's')}, below full size "
                     f"{fmt(r['elastic_below_full_s_median'], 's')}); the relaunch loses "
                     f"{fmt(r['relaunch_lost_s_median'], 's')} (no training "
                     f"{fmt(r['relaunch_no_training_s_median'], 's')}).")]
    elif name.startswith("chaos"):
        if r.get("by_target"):
            out += ["| target | trials | SUCCEEDED | struck | max steps lost | processes left | resume (median / max s) |",
                    "|---|---|---|---|---|---|---|"]
            for target, t in r["by_target"].items():
                out.append(f"| {target} | {t['trials']} | {t['succeeded']} | {t['struck']} | {t['max_steps_lost']} | "
                           f"{t['processes_left']} | {fmt(t['resume_s_median'])} / {fmt(t['resume_s_max'])} |")
            out.append("")
        out += ["| # | example | target | logged step | checkpoint | restart start_step | lost | left | resume (s) | state |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for x in r["rows"]:
            target = x.get("target", "user")
            if x.get("victim"):
                target += f" {x['victim']}"
            out.append(f"| {x['trial'] + 1} | {x['example']} | {target} | {fmt(x.get('logged_step'))} | "
                       f"{fmt(x.get('checkpoint_step'))} | {fmt(x.get('restart_start_step'))} | "
                       f"{fmt(x.get('lost_beyond_checkpoint'))} | {fmt(x.get('processes_left'))} | "
                       f"{fmt(x.get('resume_s'))} | {x.get('state')} |")
    elif name == "airflow_log" and r.get("runs"):
        out += ["| way | DAG run | lines | every line once | delay median (s) | p95 (s) | max (s) |",
                "|---|---|---|---|---|---|---|"]
        for way, x in r["runs"].items():
            out.append(f"| {way} | {x['dag_run']} | {x['lines']} | {'yes' if x['every_line_once'] else 'no'} | "
                       f"{fmt(x['delay_median_s'])} | {fmt(x['delay_p95_s'])} | {fmt(x['delay_max_s'])} |")
    elif name == "notebook_start" and r.get("pairs"):
        out += [("| pair | bare JupyterLab in a skein container (s) | tony notebook, URL answering (s) | "
                "URL printed (s) | ratio |"), "|---|---|---|---|---|"]
        out += [f"| {i + 1} | {p['floor']['seconds']} | {p['runtime']['seconds']} | {p['runtime']['url_printed_s']} | "
                f"{p['ratio']} |" for i, p in enumerate(r["pairs"])]
    return out


ANALYSIS = "## Analysis"


def analysis_of(doc: Path) -> str:
    """The hand-written part of ``doc``: from its analysis heading to its end (empty: none yet)."""
    if not doc.exists():
        return ""
    text = doc.read_text()
    at = text.find(f"\n{ANALYSIS}\n")
    return text[at + 1:].rstrip() if at >= 0 else ""


def document(res: dict[str, dict], made: dict[str, Path], doc: Path) -> str:
    rel = lambda p: os.path.relpath(p, doc.parent)
    lines = ["# Benchmarks", "",
             ("Generated by `python bench/report.py` from `bench/results/*.json`; the analysis below the "
              "tables is written by hand in this file and kept when it is generated again. Each benchmark is a script, `python bench/<name>.py "
              "[--quick] [--json]`, that writes `bench/results/<name>.json`; see each script's docstring for "
              "exactly what it times and against what floor."), "",
             ("Running them: the plots need `matplotlib`, the launch profile `pyinstrument` (both in the "
              "`bench` extra); `throughput` and `chaos` need the `tensorflow` extra (and `throughput`'s DDP half "
              "the `pytorch` and `examples` extras), `yarn_submit`, `follow_many`, the mini cluster parts of "
              "`recovery` and `gang_packing` the `yarn` extra plus Java 17 (they start a mini cluster, or reuse "
              "the one in `--minicluster DIR` / `$TONY_BENCH_MINICLUSTER`). A full pass of them all takes about "
              "50 minutes on 2 cores; `--quick` runs take seconds to a minute each. `--profile` (launch, "
              "am_scale) adds the profiles quoted below."), ""]
    hosts = {json.dumps({k: r["host"].get(k) for k in ("cores", "cpu", "memory_gb")}) for r in res.values()}
    for h in hosts:
        h = json.loads(h)
        lines.append(f"Machine: {h['cores']} cores ({h['cpu']}), {h['memory_gb']} GiB. Compare ratios "
                     "(both sides of each measured in the same run), not absolute times: the load averages "
                     "at the start and end of each run are in its result file.")
    lines += ["", "## Latest results", ""] + summary_table(res)
    for name in ORDER:
        if name not in res:
            continue
        lines += ["", f"## {name}", "", f"`{res[name]['command']}`", ""] + details(name, res[name])
        if name in made:
            lines += ["", f"![{name}]({rel(made[name])})"]
    analysis = analysis_of(doc)
    if analysis:
        lines += ["", analysis]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description="Write docs/benchmarks.md from the benchmark results")
    ap.add_argument("--results", type=Path, default=BENCH / "results")
    ap.add_argument("--doc", type=Path, default=REPO / "docs" / "benchmarks.md")
    args = ap.parse_args()
    res = load(args.results)
    made = plots(res, args.results / "plots")
    args.doc.write_text(document(res, made, args.doc.resolve()))
    print(f"wrote {args.doc} ({len(res)} benchmarks, {len(made)} plots)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
