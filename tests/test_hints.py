"""The hint line that ends a failed run: the likely cause, read from what the script printed, and the grant or
command that fixes it (unit tests of the reading; the sandboxed cases run for real in test_corpus_scripts and
test_network_hosts)."""

from __future__ import annotations

from skills_magic.safety.hints import failure_hint

PYTHON_MISSING_FILE = """Traceback (most recent call last):
  File "/s/generate_report.py", line 9, in <module>
    data = open(sys.argv[1]).read()
FileNotFoundError: [Errno 2] No such file or directory: 'loop.json'
"""
PYTHON_MISSING_PROGRAM = """Traceback (most recent call last):
  File "/usr/lib/python3.11/subprocess.py", line 1901, in _execute_child
    raise child_exception_type(errno_num, err_msg, err_filename)
FileNotFoundError: [Errno 2] No such file or directory: 'soffice'
"""


def hint(stderr: str, exit_code: int = 1, **kw) -> str | None:
    options = {"skill": "x", "subject": "scripts/s.py", "network": False}
    options.update(kw)
    return failure_hint(stderr, exit_code, False, **options)


def test_a_missing_input_file_is_not_taken_for_a_missing_program():
    assert hint(PYTHON_MISSING_FILE) is None


def test_a_program_subprocess_could_not_start_is_named_with_what_installs_it():
    assert hint(PYTHON_MISSING_PROGRAM) == ("hint: the program 'soffice' is not on this machine (or not on PATH); "
                                            "install it (apt-get install libreoffice)")
    assert "'node'" in hint("init.sh: line 4: node: command not found\n")


def test_a_missing_program_reported_on_stdout_is_named_too():
    found = failure_hint("", 1, False, skill="x", subject="scripts/s.py", network=False,
                         stdout="Error: pandoc is not installed.\n")
    assert found == "hint: the program 'pandoc' is not on this machine (or not on PATH); install it (apt-get install pandoc)"


def test_the_network_hint_names_the_host_the_script_tried():
    stderr = ("requests.exceptions.ConnectionError: HTTPSConnectionPool(host='doi.org', port=443): Max retries exceeded "
              "(Caused by NameResolutionError(\"Failed to resolve 'doi.org' ([Errno -3] Temporary failure in name "
              "resolution)\"))\n")
    assert hint(stderr).endswith("%skills allow x:scripts/s.py --network doi.org")


def test_a_missing_package_names_the_pip_name():
    assert hint("ModuleNotFoundError: No module named 'yaml'\n") == (
        "hint: the Python package 'pyyaml' is not installed in the kernel's environment: %pip install pyyaml "
        "(the script runs with the kernel's Python)")


def test_nothing_to_say_for_an_ordinary_failure():
    assert hint("ValueError: bad value\n") is None
