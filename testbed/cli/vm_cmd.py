"""`kvbed up|down|status|image`: QEMU VMs with an emulated conv/FDP/ZNS NVMe or CXL device.

``--backend femu`` runs the guest on FEMU's QEMU (``kvbed femu build``) with FEMU's flash SSD as the
conv/FDP/ZNS device, its options derived from the same parameters (``kvbed femu args`` shows how).

Device parameters are the model's own dataclass fields (``ru_bytes=16MiB``,
``nruh=8``, ``zone_bytes=64MiB``, ``cxl_bytes=512MiB``) plus the VM's
(``mem_bytes``, ``cpus``, ``mdts_bytes``, ``zasl_bytes``), given as ``k=v``
``--param k=v`` (``-p k=v``), as every command takes parameters.
"""

from __future__ import annotations

import json
import time

import click
from rich.console import Console
from rich.table import Table

from kvbed.core.errors import KvbedError
from kvbed.core.params import format_size
from testbed.cli.options import param_option
from testbed.cli.registry_help import LazyChoice, LazyHelpOption, names


def _key_params(st_params: dict, device: str) -> str:
    keys = {"conv": [("flash", "logical_bytes")],
            "fdp": [("flash", "logical_bytes"), ("fdp", "ru_bytes"), ("fdp", "nruh")],
            "zns": [("flash", "logical_bytes"), ("zns", "zone_bytes"), ("zns", "zone_cap_bytes")],
            "cxl": [("cxl", "cxl_bytes")]}.get(device, [])
    out = []
    for g, k in keys:
        v = (st_params.get(g) or {}).get(k)
        if v is not None:
            out.append(f"{k}={format_size(v) if k.endswith('_bytes') else v}")
    return " ".join(out)


@click.command("up")
@click.option("--device", "-d", required=True, type=LazyChoice("testbed.vm.qemu:VM_DEVICES"),
              help="emulated device under test")
@click.option("--backend", "-b", default="qemu", show_default=True, metavar="NAME", cls=LazyHelpOption,
              lazy_help={"names": names("testbed.vm.backends:BACKENDS")},
              help="emulator: {names} (femu needs `kvbed femu build` first)")
@click.option("--name", "-n", default=None, help="VM name (default: <device><n>)")
@param_option("device or VM parameter, e.g. ru_bytes=16MiB nruh=8 zone_bytes=64MiB mem_bytes=1GiB")
@click.option("--accel", type=click.Choice(["auto", "kvm", "tcg"]), default="auto", show_default=True,
              help="auto probes KVM once per host and falls back to TCG")
@click.option("--port", type=int, default=None, help="host loopback port for the agent (default: a free one)")
@click.option("--boot-timeout", type=float, default=90.0, show_default=True, help="seconds to wait for the agent")
@click.option("--json", "as_json", is_flag=True, help="print the VM's state as JSON")
def up(device, backend, name, params, accel, port, boot_timeout, as_json):
    """Start a VM with an emulated DEVICE and wait until its guest agent answers."""
    from testbed.vm.backends import BACKENDS
    from testbed.vm.vm import Vm

    BACKENDS.get(backend.lower())  # unknown backend: one line listing them

    console = Console(stderr=True)
    t0 = time.monotonic()
    vm = Vm.up(device, name=name, overrides=list(params), accel=accel, port=port,
               boot_timeout_s=boot_timeout, log=lambda s: console.print(f"[dim]{s}[/dim]"), backend=backend.lower())
    st = vm.state
    if as_json:
        click.echo(json.dumps({"name": st.name, "device": st.device, "backend": st.backend, "pid": st.pid, "port": st.port,
                               "accel": st.accel, "boot_s": st.boot_s, "params": st.params,
                               "device_info": (st.agent or {}).get("info")}, indent=2))
    else:
        click.echo(f"{st.name}: {st.device} VM ({st.backend}) up in {time.monotonic() - t0:.1f} s (agent on 127.0.0.1:{st.port}, "
                   f"{st.accel}, pid {st.pid}); {_key_params(st.params, st.device)}")


@click.command("down")
@click.argument("names", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="stop every VM")
def down(names, all_):
    """Stop VMs (by NAME, or --all) and remove their overlays and disks."""
    from testbed.vm.vm import down as vm_down

    if all_ and names:
        raise KvbedError("down: give VM names or --all, not both")
    done = vm_down(list(names), all_=all_)
    click.echo(f"stopped: {', '.join(done)}" if done else "no VMs")


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def status(as_json):
    """List VMs: name, device, state, pid, port, accel, uptime."""
    from testbed.vm.vm import status as vm_status

    rows = vm_status()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no VMs")
        return
    t = Table(title="kvbed VMs")
    for col in ("name", "device", "backend", "state", "pid", "port", "accel", "boot s", "uptime s", "params"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["name"], r["device"], r.get("backend", "qemu"), r["state"], str(r["pid"]), str(r["port"]), r["accel"], f"{r['boot_s']:.1f}",
                  f"{r['uptime_s']:.0f}", _key_params(r["params"], r["device"]))
    Console().print(t)


@click.group("image")
def image():
    """Build, list and remove guest images (cached by recipe hash)."""


@image.command("build")
@click.option("--force", is_flag=True, help="rebuild even if the current recipe's image is cached")
@click.option("--kernel-deb", type=click.Path(exists=True, dir_okay=False), default=None,
              help="use this linux-image-*-cloud-amd64 .deb instead of downloading one")
def image_build(force, kernel_deb):
    """Build the guest image for the current recipe (images/guest + the agent)."""
    from testbed.vm import image as im

    console = Console(stderr=True)
    t0 = time.monotonic()
    img = im.build(force=force, kernel_deb=kernel_deb, log=lambda s: console.print(f"[dim]{s}[/dim]"))
    m = img.manifest()
    click.echo(f"image {img.hash}: kernel {m.get('kernel_release', '?')}, "
               f"{sum(m.get('files', {}).values()) / 2**20:.0f} MiB in {img.path} ({time.monotonic() - t0:.1f} s)")


@image.command("list")
@click.option("--json", "as_json", is_flag=True, help="print the images as JSON")
def image_list(as_json):
    """List cached images; the one the current recipe uses is marked."""
    from testbed.vm import image as im

    current = im.recipe_hash()
    rows = []
    for img in im.list_images():
        m = img.manifest()
        rows.append({"hash": img.hash, "current": img.hash == current, "kernel": m.get("kernel_release", "?"),
                     "bytes": sum(m.get("files", {}).values()), "built_unix": m.get("built_unix", 0),
                     "path": str(img.path)})
    if as_json:
        click.echo(json.dumps({"current_recipe": current, "images": rows}, indent=2))
        return
    if not rows:
        click.echo(f"no images (current recipe {current}: `kvbed image build` makes it)")
        return
    t = Table(title=f"kvbed images (current recipe {current})")
    for col in ("hash", "current", "kernel", "size", "built"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["hash"], "*" if r["current"] else "", r["kernel"], f"{r['bytes'] / 2**20:.0f} MiB",
                  time.strftime("%Y-%m-%d %H:%M", time.localtime(r["built_unix"])))
    Console().print(t)


@image.command("rm")
@click.argument("hash_prefix", required=False)
@click.option("--all", "all_", is_flag=True, help="remove every cached image")
@click.option("--stale", is_flag=True, help="remove every image but the current recipe's")
def image_rm(hash_prefix, all_, stale):
    """Remove a cached image by hash (or unique prefix), --stale ones, or --all."""
    from testbed.vm import image as im

    if stale:
        current = im.recipe_hash()
        gone = [h for i in im.list_images() if i.hash != current for h in im.remove(i.hash)]
    else:
        gone = im.remove(hash_prefix, all_=all_)
    click.echo(f"removed: {', '.join(gone)}" if gone else "no images")
