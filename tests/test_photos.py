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
