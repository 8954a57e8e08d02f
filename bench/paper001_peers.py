"""Paper 001's blur tasks on Dask distributed and Ray, for braid bench --paper 001.

Each task decodes the 19 KB sample GIF, applies a gaussian blur with sigma 1
(braid's blur with radius 2) and encodes the result as PNG, like braid's
blur unit. A job is N such tasks submitted at once; its time runs from the
first submission until every result is back at the client. Prints one JSON
object per job on standard output.

usage: python paper001_peers.py FRAMEWORK GIF WORKERS THREADS TASKS REPS
  FRAMEWORK  dask, ray, or alone (the task in this process, serially, at
             most 100 per job)
  TASKS      comma-separated task counts, e.g. 10,100,500,1000
"""

import io
import json
import sys
import time


def blur(data):
    from PIL import Image, ImageFilter

    img = Image.open(io.BytesIO(data)).convert("RGBA")
    out = img.filter(ImageFilter.GaussianBlur(radius=1))
    buf = io.BytesIO()
    out.save(buf, format="PNG")
    return buf.getvalue()


def run_dask(data, workers, threads, tasks, reps):
    from dask.distributed import Client, LocalCluster

    with LocalCluster(n_workers=workers, threads_per_worker=threads, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(workers)

        def job(n):
            t0 = time.perf_counter()
            futs = [client.submit(blur, data, pure=False) for _ in range(n)]
            outs = client.gather(futs)
            el = time.perf_counter() - t0
            assert all(o[:8] == b"\x89PNG\r\n\x1a\n" for o in outs)
            return el

        job(10)  # warm-up, as braid's runs
        for rep in range(reps):
            for n in tasks:
                yield rep, n, job(n)


def run_ray(data, workers, threads, tasks, reps):
    import ray

    ray.init(num_cpus=workers * threads, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    try:
        rblur = ray.remote(blur)

        def job(n):
            t0 = time.perf_counter()
            outs = ray.get([rblur.remote(data) for _ in range(n)])
            el = time.perf_counter() - t0
            assert all(o[:8] == b"\x89PNG\r\n\x1a\n" for o in outs)
            return el

        job(10)
        for rep in range(reps):
            for n in tasks:
                yield rep, n, job(n)
    finally:
        ray.shutdown()


def run_alone(data, workers, threads, tasks, reps):
    """The task alone, one after the other in this process: its compute cost."""
    blur(data)
    for rep in range(reps):
        for n in tasks:
            n = min(n, 100)
            t0 = time.perf_counter()
            for _ in range(n):
                blur(data)
            yield rep, n, time.perf_counter() - t0


def main():
    framework, gif, workers, threads, tasks, reps = sys.argv[1:7]
    with open(gif, "rb") as f:
        data = f.read()
    tasks = [int(t) for t in tasks.split(",")]
    run = {"dask": run_dask, "ray": run_ray, "alone": run_alone}[framework]
    for rep, n, el in run(data, int(workers), int(threads), tasks, int(reps)):
        print(json.dumps({"framework": framework, "rep": rep, "tasks": n, "ms_per_task": el * 1000 / n}), flush=True)
        print(f"{framework} rep {rep}: {n} tasks, {el * 1000 / n:.2f} ms per task", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
