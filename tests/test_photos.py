from gpufeed.measure import photos


def test_every_photo_has_a_licence_entry():
    licences = (photos.photos_dir() / "LICENSES.md").read_text()
    names = [p.name for p in photos.photo_paths()]
    assert len(names) >= 5
    for name in names:
        assert f"`{name}`" in licences, f"{name} has no entry in LICENSES.md"
    for word in ("public domain", "CC0"):
        assert word in licences


def test_photos_are_real_rgb_photos():
    for path in photos.photo_paths():
        im = photos.load_photo(path)
        assert im.mode == "RGB" and min(im.size) >= 256


def test_the_licence_at_the_root_is_pyprojects_and_points_to_the_photos_own():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    text = (root / "LICENSE").read_text()
    assert 'license = "MIT"' in (root / "pyproject.toml").read_text()
    assert text.startswith("MIT License") and "Permission is hereby granted" in text
    assert "assets/photos/LICENSES.md" in text and (root / "assets" / "photos" / "LICENSES.md").is_file()
