import json

from gpufeed.measure.machine import cache_bytes, describe, machine_info, slug


def test_machine_info_is_json_ready_and_complete():
    info = machine_info()
    json.dumps(info)
    for key in ("cpu", "cores", "memory_gib", "python", "torch", "torchvision", "gpu", "commit", "quick"):
        assert key in info
    assert info["cores"] >= 1


def test_slugs_name_the_gpu_or_the_cpu():
    assert slug({"gpu": "NVIDIA H200"}) == "h200"
    assert slug({"gpu": "NVIDIA GeForce RTX 4090"}) == "rtx-4090"
    assert slug({"gpu": "NVIDIA A100-SXM4-80GB"}) == "a100-sxm4-80gb"
    assert slug({"gpu": None, "cpu": "AMD EPYC"}) == "cpu-epyc"
    assert slug({"gpu": None, "cpu": "Apple M2"}) == "cpu-apple-m2"
    assert slug({"gpu": None, "cpu": ""}) == "cpu-unknown"


def test_describe_names_the_hardware():
    text = describe({"gpu": "NVIDIA H200", "cpu": "Xeon", "cores": 16, "torch": "2.11.0"})
    assert "NVIDIA H200" in text and "16 cores" in text and "2.11.0" in text


def test_cache_bytes_reads_the_last_level_cache_from_sysfs(tmp_path):
    for i, (level, kind, size) in enumerate([(1, "Data", "32K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"),
                                             (3, "Unified", "32768K")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert cache_bytes(3, root=tmp_path) == 32 << 20
    assert cache_bytes(2, root=tmp_path) == 1 << 20
    assert cache_bytes(1, root=tmp_path) == 32 << 10  # the data cache, not the instruction cache


def test_file_system_names_the_nearest_mount_above_a_path(monkeypatch, tmp_path):
    from types import SimpleNamespace as Mount

    import psutil

    from gpufeed.measure import machine

    mounts = [Mount(mountpoint="/", fstype="ext4"), Mount(mountpoint=str(tmp_path), fstype="tmpfs")]
    monkeypatch.setattr(psutil, "disk_partitions", lambda all=False: mounts)
    assert machine.file_system(tmp_path / "a" / "file.bin") == "tmpfs"  # the deeper mount wins
    assert machine.file_system("/") == "ext4"
    monkeypatch.setattr(psutil, "disk_partitions", lambda all=False: [])
    assert machine.file_system(tmp_path) == "unknown"
    assert "tmpfs" not in machine.DISK_FILE_SYSTEMS and "overlay" not in machine.DISK_FILE_SYSTEMS
