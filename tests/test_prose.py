from gpufeed.course import prose


def test_say_prints_outside_a_notebook(capsys):
    assert not prose.in_notebook()
    prose.say("pinned is **2x** pageable")
    assert capsys.readouterr().out == "pinned is **2x** pageable\n"


def test_say_displays_markdown_in_a_kernel(monkeypatch):
    import IPython
    import IPython.display

    class ZMQInteractiveShell:  # stands in for the Jupyter kernel's shell
        pass

    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: ZMQInteractiveShell())
    monkeypatch.setattr(IPython.display, "display", shown.append)
    prose.say("a *sentence*")
    assert isinstance(shown[0], IPython.display.Markdown) and shown[0].data == "a *sentence*"
