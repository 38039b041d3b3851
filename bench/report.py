#!/usr/bin/env python3
"""Turns the samples collected by scripts/bench.sh into a table (stdout), markdown and JSON.

Input: a results TSV (key, contender, round, value), a notes TSV (key, contender, note) for
what could not be measured, and optionally FUSE requests per job by opcode (opcode, contender,
value). Machine facts come from BENCH_R_* environment variables. With --history, rows are also
compared with the newest earlier result of the same configuration there (run to run).
Only measured samples are reported; anything else is "n/a (reason)".
"""
import argparse
import collections
import glob
import json
import os
import re
import statistics
import sys

CONTENDERS = ["raw", "passthrough_ll", "passthrough_ll_dp", "passthrough_hp", "mergerfs", "bindfs",
              "fencefs"]
# Column names of the fencefs ÷ contender ratios.
SHORT = {"raw": "raw", "passthrough_ll": "pt_ll", "passthrough_ll_dp": "pt_ll_dp",
         "passthrough_hp": "pt_hp",
         "mergerfs": "mergerfs", "bindfs": "bindfs"}
# Rows computed from two others: key -> (numerator, denominator), medians.
DERIVED = {"adv_ratio": ("adv_d16", "adv_d1"), "cpu_per_req_t1": ("cpu_legacy_t1", "req_legacy_t1")}
# Configuration keys that may differ between two runs still compared run to run.
NOT_CONFIG = {"setup", "fencefs_binary", "fencefs_options"}

# What an earlier run without a configuration key measured (default: without the setting).
ADDED_SINCE = {
    "order": "it ran the contenders in the same order in every round.",
    "meta_cold": "it had no cold-stat rows (runs since `a458217` unlinked names dropped first, "
                 "as this one does).",
    "held_cpu": "it had no rows for fio held on one CPU nor for fio's moves between CPUs (each "
                "round now runs that held job right after the random-write job).",
}
# key, section, label, unit, better ("higher"/"lower"), target kind
ROWS = [
    ("fio_seqwrite_1m", "overlay", "fio seq write, 1 MiB blocks", "MB/s", "higher", "overlay"),
    ("fio_randwrite_4k", "overlay", "fio random write, 4 KiB", "IOPS", "higher", "overlay"),
    ("fio_randwrite_4k_held", "overlay", "fio random write, 4 KiB, fio held on CPU {held_cpu} (no target)", "IOPS",
     "higher", None),
    ("fio_randread_4k", "overlay", "fio random read, 4 KiB", "IOPS", "higher", "overlay"),
    ("coldread_seq", "overlay", "cold sequential read (page cache dropped), 1 MiB read(2)s", "MB/s",
     "higher", "overlay"),
    ("reread_1m", "overlay", "re-read an unchanged 1 MiB file (open, read, close)", "MB/s", "higher",
     "overlay"),
    ("legacy_t1", "overlay", "legacy job (tmp+write 4K+rename), 1 thread", "files/s", "higher", "overlay"),
    ("legacy_t4", "overlay", "legacy job (tmp+write 4K+rename), 4 threads", "files/s", "higher", "overlay"),
    ("meta_create", "overlay", "metadata: create", "ops/s", "higher", "overlay"),
    ("meta_stat", "overlay", "metadata: stat", "ops/s", "higher", "overlay"),
    ("meta_stat_cold", "overlay", "metadata: stat of names not cached (a LOOKUP each)", "ops/s", "higher",
     "overlay"),
    ("meta_list", "overlay", "metadata: list directory", "entries/s", "higher", "overlay"),
    ("meta_unlink", "overlay", "metadata: unlink", "ops/s", "higher", "overlay"),
    ("cpu_legacy_t1", "daemon", "daemon CPU per legacy job, 1 thread", "µs/file", "lower", "cpu"),
    ("cpu_legacy_t4", "daemon", "daemon CPU per legacy job, 4 threads", "µs/file", "lower", "cpu"),
    ("cpu_fio_seqwrite_1m", "daemon", "daemon CPU per 1 MiB write(2), fio seq write", "µs/write", "lower", None),
    ("cpu_fio_randwrite_4k", "daemon", "daemon CPU per 4 KiB write(2), fio random write", "µs/write", "lower", None),
    ("cpu_fio_randwrite_4k_held", "daemon", "daemon CPU per 4 KiB write(2), fio random write held on CPU {held_cpu}",
     "µs/write", "lower", None),
    ("cpu_fio_randread_4k", "daemon", "daemon CPU per 4 KiB read(2), fio random read", "µs/read", "lower", None),
    ("cpu_coldread_seq", "daemon", "daemon CPU per MiB, cold sequential read", "µs/MiB", "lower", None),
    ("cpu_meta_create", "daemon", "daemon CPU per create (metadata: create)", "µs/op", "lower", None),
    ("cpu_meta_stat", "daemon", "daemon CPU per stat (metadata: stat)", "µs/op", "lower", None),
    ("cpu_meta_stat_cold", "daemon", "daemon CPU per stat of a name not cached", "µs/op", "lower", None),
    ("cpu_meta_unlink", "daemon", "daemon CPU per unlink (metadata: unlink)", "µs/op", "lower", None),
    ("req_legacy_t1", "daemon", "FUSE requests per legacy job, 1 thread (kernel tracepoint)", "req/job",
     "lower", "req"),
    ("cpu_per_req_t1", "daemon", "daemon CPU per FUSE request, legacy job, 1 thread", "µs/req", "lower",
     None),
    ("groups_read", "daemon", "reading a caller's groups from /proc, as fuse_req_getgroups does", "µs",
     "lower", None),
    ("req_legacy_t1_self", "daemon", "FUSE requests per legacy job, 1 thread (fencefs' own counters)",
     "req/job", "lower", None),
    ("req_rdwr_write", "daemon", "FUSE requests per 4 KiB write, O_RDWR file (kernel tracepoint)", "req/write",
     "lower", "req"),
    ("moves_randwrite_4k", "daemon", "fio moved to another CPU, per 4 KiB random write (kernel tracepoint)",
     "moves/write", "lower", None),
    ("rss_bound_growth", "daemon", "RSS growth per bound process, {bound_procs} live", "bytes", "lower", None),
    ("rss_inode_growth", "daemon", "RSS growth per cached inode, {rss_inodes} inodes", "bytes", "lower", "rss"),
    ("rss_inode_growth_small", "daemon", "RSS growth per cached inode, first {rss_inodes_small} (fd limit)", "bytes", "lower", "rss"),
    ("rss_peak", "daemon", "peak RSS (VmHWM), {rss_inodes} lookups (+ {bound_procs} bound)", "KiB", "lower", None),
    ("rss_peak_small", "daemon", "peak RSS (VmHWM), {rss_inodes_small} lookups (+ {bound_procs} bound)", "KiB", "lower", None),
    ("adv_d1", "journal", "epoch advances, 1 domain", "adv/s", "higher", None),
    ("adv_d4", "journal", "epoch advances, 4 concurrent domains", "adv/s", "higher", None),
    ("adv_d16", "journal", "epoch advances, 16 concurrent domains", "adv/s", "higher", None),
    ("adv_ratio", "journal", "advances/s at 16 domains ÷ at 1 domain", "x", "higher", "adv_ratio"),
    ("cl_adv_m1_p50", "journal", "cluster advance latency, 1 member, median", "ms", "lower", None),
    ("cl_adv_m1_p99", "journal", "cluster advance latency, 1 member, p99", "ms", "lower", None),
    ("cl_adv_m3_p50", "journal", "cluster advance latency, 3 members, median", "ms", "lower", None),
    ("cl_adv_m3_p99", "journal", "cluster advance latency, 3 members, p99", "ms", "lower", None),
    ("cl_adv_m5_p50", "journal", "cluster advance latency, 5 members, median", "ms", "lower", None),
    ("cl_adv_m5_p99", "journal", "cluster advance latency, 5 members, p99", "ms", "lower", None),
    ("cl_eq_on", "journal", "equal-token 4 KiB writes, cluster mode on (timeout=5)", "ops/s", "higher", None),
    ("cl_eq_off", "journal", "equal-token 4 KiB writes, cluster mode off (timeout=5)", "ops/s", "higher", None),
    ("recovery_lib", "journal", "recovery (StateStore::open), cold cache", "s", "lower", "recovery"),
    ("recovery_mount", "journal", "recovery (time to mount), cold cache", "s", "lower", "recovery"),
    ("recovery_mount_empty", "journal", "time to mount, fresh state (baseline)", "s", "lower", None),
    ("tok_acquire", "journal", "token acquisitions, `fencectl run --acquire -- true`", "acq/s", "higher", None),
    ("tok_etcd", "journal", "token acquisitions through etcd (lock, counter, advance, release)", "acq/s", "higher", None),
    ("tok_lease_loss", "journal", "lease loss to the job's process group gone (TTL 3 s)", "s", "lower", None),
]

TARGET_TEXT = {
    "overlay": "fencefs >= 1.0x every contender",
    "cpu": "fencefs <= passthrough_ll",
    "req": "fencefs <= every contender",
    "rss": "fencefs < 200 bytes",
    "adv_ratio": ">= 5x",
    "recovery": "< 1 s",
}


def fmt(v):
    if v is None:
        return "n/a"
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def find_previous(history, config, out_json):
    """The newest timestamped result in `history` with the same configuration (settings it predates
    aside), and its path."""
    if not history or not os.path.isdir(history):
        return None, None
    mine = {k: v for k, v in config.items() if k not in NOT_CONFIG}
    for path in sorted(glob.glob(os.path.join(history, "*.json")), reverse=True):
        if not re.fullmatch(r"\d{8}T\d{6}Z\.json", os.path.basename(path)):
            continue
        if os.path.abspath(path) == os.path.abspath(out_json):
            continue
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        theirs = {k: v for k, v in doc.get("config", {}).items() if k not in NOT_CONFIG}
        # A setting added since that run (absent there) is named in the report, not a mismatch.
        if theirs and theirs == {k: v for k, v in mine.items() if k in theirs} and doc.get("contenders") is not None:
            return doc, path
    return None, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", required=True)
    ap.add_argument("--notes", required=True)
    ap.add_argument("--out-md", required=True)
    ap.add_argument("--out-json", required=True)
    ap.add_argument("--contenders", default=" ".join(CONTENDERS))
    ap.add_argument("--config", nargs="*", default=[])
    ap.add_argument("--req-ops", help="TSV: FUSE opcode, contender, requests per job")
    ap.add_argument("--history", help="directory of earlier results (timestamped *.json)")
    args = ap.parse_args()

    selected = [c for c in CONTENDERS if c in args.contenders.split()]
    config = dict(kv.split("=", 1) for kv in args.config)
    rounds = int(config.get("rounds", "0") or 0)
    rss_rounds = int(config.get("rss_rounds", "0") or 0)

    samples = {}  # (key, contender) -> [floats]
    with open(args.results) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 4 or parts[3] == "":
                continue
            key, c, _, v = parts
            samples.setdefault((key, c), []).append(float(v))
    notes = {}  # (key, contender) -> [str]
    with open(args.notes) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 3:
                continue
            notes.setdefault((parts[0], parts[1]), []).append(parts[2])
    # A failed metadata run is noted once under meta_create; it stands for the whole run.
    for c in selected:
        for k in ("meta_stat", "meta_stat_cold", "meta_list", "meta_unlink"):
            for n in notes.get(("meta_create", c), []):
                notes.setdefault((k, c), []).append(n)

    def median(key, c):
        s = samples.get((key, c))
        return statistics.median(s) if s else None

    rows = []
    for key, section, label, unit, better, tkind in ROWS:
        if key in ("rss_inode_growth_small", "rss_peak_small") and not config.get("rss_inodes_small"):
            continue  # only measured where the fd limit is below the inode count
        if key in ("fio_randwrite_4k_held", "cpu_fio_randwrite_4k_held", "moves_randwrite_4k") \
                and not config.get("held_cpu"):
            continue  # runs before `5a74e99` had neither
        label = label.format_map(collections.defaultdict(lambda: "?", config))
        row = {"key": key, "section": section, "label": label, "unit": unit, "better": better,
               "target": TARGET_TEXT.get(tkind), "values": {}}
        if section == "journal" or key in ("req_legacy_t1_self", "groups_read"):
            contenders_here = [c for c in selected if c == "fencefs"]
        else:
            contenders_here = selected
        for c in contenders_here:
            if key in DERIVED:
                ka, kb = DERIVED[key]
                a, b = median(ka, c), median(kb, c)
                val = a / b if a is not None and b else None
                cell = {"median": val, "samples": [], "derived_from": f"median({ka}) / median({kb})"}
                if val is None:
                    inherited = notes.get((ka, c), []) + notes.get((kb, c), [])
                    cell["note"] = "; ".join(dict.fromkeys(inherited)) or f"needs both {ka} and {kb}"
            else:
                s = samples.get((key, c), [])
                cell = {"median": statistics.median(s) if s else None, "samples": s}
                expected = rss_rounds if key.startswith("rss_") else 1 if key.startswith(("req_", "moves_")) else rounds
                ns = notes.get((key, c), [])
                if ns:
                    cell["note"] = "; ".join(dict.fromkeys(ns))
                elif not s:
                    cell["note"] = "not measured"
                if s and expected and len(s) < expected:
                    cell["note"] = f"{len(s)} of {expected} rounds measured" + (
                        ": " + cell["note"] if "note" in cell else "")
            row["values"][c] = cell

        def med(c):
            return row["values"].get(c, {}).get("median")

        ff = med("fencefs")
        for c in selected:
            if c != "fencefs":
                o = med(c)
                row["ratio_fencefs_" + c] = ff / o if ff is not None and o else None
        # Overlays only: raw is the ceiling, not a contender.
        overlay_ratios = [row["ratio_fencefs_" + c] for c in selected if c not in ("raw", "fencefs")
                          and row.get("ratio_fencefs_" + c) is not None]
        met = None
        if tkind == "overlay" and overlay_ratios:
            met = all(r >= 1.0 for r in overlay_ratios)
        elif tkind == "req" and overlay_ratios:
            met = all(r <= 1.0 for r in overlay_ratios)
        elif tkind == "cpu" and row.get("ratio_fencefs_passthrough_ll") is not None:
            met = row["ratio_fencefs_passthrough_ll"] <= 1.0
        elif tkind == "rss" and ff is not None:
            met = ff < 200
        elif tkind == "adv_ratio" and ff is not None:
            met = ff >= 5
        elif tkind == "recovery" and ff is not None:
            met = ff < 1.0
        row["target_met"] = met
        rows.append(row)

    machine = {
        "nproc": os.environ.get("BENCH_R_NPROC"),
        "cpu": os.environ.get("BENCH_R_MODEL"),
        "memory": os.environ.get("BENCH_R_MEM"),
        "kernel": os.environ.get("BENCH_R_KERNEL"),
        "date": os.environ.get("BENCH_R_DATE"),
        "libfuse": os.environ.get("BENCH_R_LIBFUSE"),
        "fio": os.environ.get("BENCH_R_FIO"),
        "mergerfs": os.environ.get("BENCH_R_MERGERFS"),
        "bindfs": os.environ.get("BENCH_R_BINDFS"),
        "load": os.environ.get("BENCH_R_LOAD"),
    }
    # FUSE requests per job by opcode: {opcode: {contender: value}}
    req_ops = collections.defaultdict(dict)
    if args.req_ops and os.path.exists(args.req_ops):
        with open(args.req_ops) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) == 3 and parts[2]:
                    req_ops[parts[0]][parts[1]] = float(parts[2])
    previous, prev_path = find_previous(args.history, config, args.out_json)
    doc = {"machine": machine, "config": config, "contenders": selected, "rows": rows,
           "requests_per_job_by_opcode": req_ops,
           "previous": os.path.basename(prev_path) if prev_path else None}
    with open(args.out_json, "w") as f:
        json.dump(doc, f, indent=2, ensure_ascii=False)
        f.write("\n")

    # ---- table (stdout and markdown) ----
    others = [c for c in selected if c != "fencefs"]
    head = ["workload", "unit"] + selected + ["ff/" + SHORT[c] for c in others] + ["target", "met"]
    table = []
    na_notes = []
    for row in rows:
        cells = [row["label"], row["unit"]]
        for c in selected:
            v = row["values"].get(c)
            if v is None:
                cells.append("-")
                continue
            cells.append(fmt(v["median"]) if v["median"] is not None else "n/a")
            if v.get("note"):
                na_notes.append((row["label"], c, v["note"]))
        for c in others:
            r = row.get("ratio_fencefs_" + c)
            cells.append(f"{r:.2f}x" if r is not None else "-")
        cells.append(row["target"] or "")
        cells.append({True: "yes", False: "NO", None: "" if not row["target"] else "n/a"}[row["target_met"]])
        table.append(cells)

    numeric = set(range(2, 2 + len(selected) + len(others)))
    widths = [max(len(h), *(len(r[i]) for r in table)) for i, h in enumerate(head)]

    def line(cells):
        return "  ".join(c.rjust(widths[i]) if i in numeric else c.ljust(widths[i])
                         for i, c in enumerate(cells)).rstrip()

    if config.get("quick") == "1":
        print("BENCH_QUICK=1 smoke run: tiny sizes, numbers not meaningful.")
    print(line(head))
    print("  ".join("-" * w for w in widths))
    for r in table:
        print(line(r))
    groups = {}  # (contender, note) -> [labels], so one reason shared by many rows prints once
    for label, c, n in na_notes:
        groups.setdefault((c, n), []).append(label)

    def note_lines():
        for (c, n), labels in groups.items():
            what = n if "rounds measured" in n else f"n/a ({n})"
            yield f"[{c}] {what}: " + "; ".join(labels)

    if groups:
        print()
        for l in note_lines():
            print("  " + l)

    def md_row(cells):
        return "| " + " | ".join(cells) + " |"

    md = ["# fencefs benchmarks", ""]
    if config.get("quick") == "1":
        md += ["**BENCH_QUICK=1 smoke run: tiny sizes, numbers not meaningful.**", ""]
    if config.get("setup", "ok") != "ok":
        md += [f"**scripts/setup.sh: {config['setup']}.**", ""]
    md.append(f"Run on {machine['date']}: {machine['nproc']} CPUs ({machine['cpu']}), "
              f"{machine['memory']} RAM, Linux {machine['kernel']}, libfuse {machine['libfuse']}, "
              f"mergerfs {machine['mergerfs']}, bindfs {machine['bindfs']}, {machine['fio']}. "
              f"Load average (1, 5, 15 min): {machine['load']}.")
    md.append("")
    md.append("Medians of " + config.get("rounds", "?") + " rounds, contenders interleaved in every "
              "round (" + ", ".join(selected) + (
                  "; the overlay rows ran the contenders in an order that changed every round, a Williams "
                  "Latin square over those that ran: over n rounds each runs once at every place and, "
                  "for an even n, right after every other once" if config.get("order") == "williams"
                  else "; the same order in every round") + "). Overlay and memory rows on a tmpfs backing; "
              "journal rows on the real disk (" + config.get("disk_dir", "?") + "). "
              "ff/X = fencefs ÷ X (of the medians); an overlay row's target is met when fencefs is "
              "at least 1.0x every measured overlay (raw is the ceiling, not a contender). "
              "For µs, bytes, KiB, s, req/job, req/write and moves/write, lower is better. "
              + ("fencefs ran with `" + config["fencefs_options"] + "`"
                 + (" (FUSE over io_uring; the kernel's enable_uring was set to Y for the run, "
                    "which no other daemon here asks for)" if "uring" in config["fencefs_options"]
                    else "") + "."
                 if config.get("fencefs_options") else "fencefs ran with its default options."))
    md.append("")
    md.append(md_row(head))
    md.append("|" + "|".join("---:" if i in numeric else "---" for i in range(len(head))) + "|")
    for r in table:
        md.append(md_row(r))
    if na_notes:
        md.append("")
        md.append("Not measured / partial:")
        md.append("")
        for l in note_lines():
            md.append("- " + l)
    if req_ops:
        cols = [c for c in selected if c != "raw" and any(c in v for v in req_ops.values())]
        if any("fencefs-self" in v for v in req_ops.values()):
            cols.append("fencefs-self")
        md += ["", "## FUSE requests per legacy job (1 thread), by opcode", "",
               "Counted by the kernel (tracepoint fuse:fuse_request_send, filtered to each mount): "
               "(requests for 2N jobs − requests for N jobs) ÷ N, N = "
               f"{config.get('legacy_files', '?')}. FORGET and INTERRUPT are not counted there. "
               "fencefs-self: fencefs' own counters (`fencefs_fuse_requests_total`, forgets left "
               "out) over the same runs.", ""]
        md.append(md_row(["opcode"] + cols))
        md.append("|---|" + "|".join("---:" for _ in cols) + "|")
        shown = [o for o in req_ops if any(abs(v) >= 0.005 for v in req_ops[o].values())]
        for op in sorted(shown, key=lambda o: (-max(req_ops[o].values()), o)):
            md.append(md_row([op] + [fmt(req_ops[op][c]) if c in req_ops[op] else "-" for c in cols]))
    md += ["", "## Run to run", ""]
    if previous is None:
        md.append("No earlier result with the same configuration in the results directory.")
    else:
        md.append(f"Change of every median since the previous run with the same configuration "
                  f"(`{os.path.basename(prev_path)}`, {previous.get('machine', {}).get('date', '?')}): "
                  "(this ÷ previous − 1)."
                  + (f" fencefs' options then: `{previous.get('config', {}).get('fencefs_options') or 'none'}`"
                     f", now: `{config.get('fencefs_options') or 'none'}`."
                     if previous.get("config", {}).get("fencefs_options", "")
                     != config.get("fencefs_options", "") else "")
                  + "".join(f" That run's configuration has no `{k}` (now `{v}`): "
                            + ADDED_SINCE.get(k, "the rows it governs were measured without it.")
                            for k, v in config.items()
                            if k not in NOT_CONFIG and k not in previous.get("config", {})))
        md.append("")
        md.append(md_row(["workload"] + selected))
        md.append("|---|" + "|".join("---:" for _ in selected) + "|")
        prev_rows = {r["key"]: r for r in previous.get("rows", [])}
        moves = []
        for row in rows:
            pr = prev_rows.get(row["key"])
            if not pr:
                continue
            cells = [row["label"]]
            for c in selected:
                a = row["values"].get(c, {}).get("median")
                b = pr.get("values", {}).get(c, {}).get("median")
                if a is None or not b:
                    cells.append("-")
                    continue
                ch = a / b - 1
                moves.append(abs(ch))
                cells.append(f"{ch * 100:+.0f}%".replace("-0%", "+0%"))
            if any(c != "-" for c in cells[1:]):
                md.append(md_row(cells))
        if moves:
            md += ["", f"Median move {statistics.median(moves) * 100:.0f}%, largest "
                   f"{max(moves) * 100:.0f}% (over {len(moves)} medians)."]
    md.append("")
    md.append("## Method")
    md.append("")
    md.append(
        "- passthrough_ll: libfuse's example compiled from `/usr/share/doc/libfuse3-dev/examples/"
        "passthrough_ll.c` (`cc -O2`), run as `passthrough_ll -f -o source=BACKING MNT` (default "
        "options: cache=auto, 1 s entry/attr timeout, multithreaded loop).\n"
        "- passthrough_ll_dp: the same binary with `-o default_permissions`: the kernel checks mode "
        "bits and ownership before every operation, as on fencefs (whose permissions must apply); "
        "that check refreshes a directory's attributes after each change in it (a GETATTR).\n"
        "- passthrough_hp: libfuse's C++ example, built from `passthrough_hp.cc` where the installed "
        "libfuse3-dev ships it, run as `passthrough_hp --nocache BACKING MNT` (write-through).\n"
        "- mergerfs (Debian's package): `mergerfs -f -o minfreespace=16M BACKING MNT` (one branch; "
        "the lowered minfreespace only lets it create files on the tmpfs: its default 4G refuses).\n"
        "- bindfs (Debian's package): `bindfs -f BACKING MNT` (default options).\n"
        "- fencefs: `build/fencefs -f " + (config.get("fencefs_options", "") + " " if config.get("fencefs_options") else "")
        + "BACKING MNT`; every workload runs under "
        "`fencectl run --mount MNT --domain / --token 1 --` (a bound token).\n"
        f"- fio: psync, buffered, time-based {config.get('fio_runtime_s', '?')} s per job on a "
        f"{config.get('fio_size', '?')} file (seq write 1 MiB → MB/s; random write/read 4 KiB → IOPS; "
        "fio drops the file's cached pages at open, so random reads reach the daemon).\n"
        + (f"- random write held on CPU {config['held_cpu']}: the same random-write job, in the same "
           f"rounds, under `taskset -c {config['held_cpu']}`, so that the scheduler cannot move fio to "
           "another CPU when a reply wakes it; not an overlay target: it shows what fencefs gains "
           "without the moves"
           + (" (its rings serve a request on its caller's CPU)" if "uring" in config.get("fencefs_options", "") else "")
           + ", and holding fio slows a daemon that serves from the other CPU.\n"
           "- fio's moves between CPUs: one untimed 2 s random-write run per daemon after the timed "
           "rounds, on a file sized first (`truncate`: nothing for fio to lay out, and each write is "
           "the first to its page), with the tracepoint sched:sched_migrate_task enabled in a tracefs "
           "instance and filtered to processes named fio (its parent too); moves ÷ fio's writes.\n" if config.get("held_cpu") else "") +
        "- cold sequential read: the fio file read start to end in 1 MiB read(2)s, once per round, "
        "after `echo 1 > /proc/sys/vm/drop_caches` (the kernel's clean pages of every mount go; the "
        "tmpfs keeps its data): what cp, tar or rsync cost reading a file not cached (MB/s; daemon "
        "CPU per MiB, in ticks as below, coarse for a read this short).\n"
        "- re-read: one 1 MiB file, written once, then opened, read whole and closed again and again "
        f"for {config.get('fio_runtime_s', '?')} s (MB/s): what the kernel keeps of an unchanged "
        "file across opens.\n"
        f"- legacy job (`bench/legacy_job.c`): {config.get('legacy_files', '?')} jobs per run, each "
        "open(tmp, O_CREAT|O_TRUNC), write 4 KiB, close, rename to its final name; threads each in "
        "their own subdirectory.\n"
        "- daemon CPU: utime+stime of the daemon from /proc/PID/stat (all threads, "
        f"1/{config.get('clk_tck', '?')} s ticks) before and after each legacy-job run, ÷ files.\n"
        "- daemon CPU per FUSE request: the median daemon CPU per 1-thread job ÷ the requests per "
        "job (below).\n"
        "- caller's groups (`bench/groups_cost.c`): open, read, parse and close a live process's "
        "/proc/PID/task/PID/status 20,000 times per round, as libfuse 3.14's fuse_req_getgroups "
        "does: the price per request of a daemon checking permissions itself, since a request "
        "carries the caller's uid, gid and pid but not its groups.\n"
        "- FUSE requests per legacy job: one untimed pass per daemon after the timed rounds, on the "
        "same mounts, with the tracepoint fuse:fuse_request_send enabled in a tracefs instance and "
        "filtered to the mount's connection (its device number); the table above splits it by "
        "opcode.\n"
        f"- metadata (`bench/meta.c`): create and unlink {config.get('meta_files', '?')} files; stat "
        f"them in passes over all of them for at least {config.get('meta_seconds', '?')} s; list "
        f"that directory at least {config.get('meta_listings', '?')} times and for at least "
        f"{config.get('meta_seconds', '?')} s (entries/s); "
        + (f"cold stat: passes over all of them, each after dropping the kernel's dentries "
           f"(`vm.drop_caches=2`, then 0.5 s for the FORGETs), until the timed passes add up to "
           f"{config.get('meta_seconds', '?')} s, 10 passes at most (at least a LOOKUP per stat for every daemon, "
           "whatever its cache timeouts; raw's tmpfs keeps its dentries, so its stats there are "
           "not cold); drop them again and unlink every file"
           if config.get("meta_cold") == "1" else
           "then unlink them after dropping the kernel's dentries (`vm.drop_caches=2`, then 0.5 s "
           "for the FORGETs)")
        + ", so that every daemon looks each file up again whatever its cache timeouts. Daemon CPU as for the "
        "legacy job, over the create, stat"
        + (", cold stat" if config.get("meta_cold") == "1" else "") + " and unlink phases.\n"
        f"- memory: a fresh mount over {config.get('rss_inodes', '?')} files created in BACKING. "
        f"fencefs first: {config.get('bound_procs', '?')} live `sh` → `sleep` processes each bound "
        "with `echo \"bind / 1\" > MNT/.fencefs/ctl` (VmRSS growth ÷ processes), kept bound. Then, "
        "every daemon: VmRSS before/after stat-ing every file through the mount ÷ files (user-space "
        "memory only: the kernel memory behind any fd a daemon keeps per inode is not in RSS); "
        "peak = VmHWM at the end. "
        f"{config.get('rss_rounds', '?')} round(s). Open-file limit for the daemons: "
        f"{config.get('fd_limit', '?')}"
        + (f" (cannot be raised on this machine, so the first {config['rss_inodes_small']} lookups "
           "are also measured on their own)" if config.get("rss_inodes_small") else "") + ".\n"
        f"- advances (`bench/advance.c`): 1, 4 or 16 threads, one per declared domain /dK, each "
        "looping ioctl(FENCEFS_IOC_ADVANCE) on /dK with increasing N (writes to .fencefs/ctl "
        "would be serialised by the kernel's per-file lock) for "
        f"{config.get('advance_seconds', '?')} s; a fencefs mount whose backing is on "
        f"{config.get('disk_dir', '?')}.\n"
        f"- recovery: a {config.get('journal_records', '?')}-record journal generated with "
        "`fencefs::journal::StateStore::advance` (`bench/journal_bench.cc`, compaction disabled, on "
        f"tmpfs), copied to {config.get('disk_dir', '?')}, fsynced and dropped from the page cache "
        "(posix_fadvise DONTNEED); then timed: StateStore::open with default options, and the time "
        "from starting `fencefs -f` to the mount appearing in /proc/mounts (same journal appended "
        "to the state of an initialised backing; the fresh-state row is the baseline).")
    md.append("")
    md.append("Configuration: " + ", ".join(f"{k}={v}" for k, v in config.items()))
    md.append("")
    with open(args.out_md, "w") as f:
        f.write("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
