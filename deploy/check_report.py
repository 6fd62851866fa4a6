"""The verdict every deploy/ check ends with: its problems, one a line, then a summary line ending
in OK or FAILED; the exit status for CTest."""


def report(problems, summary):
    for p in problems:
        print(p)
    print("%s: %s" % (summary, "FAILED" if problems else "OK"))
    return 1 if problems else 0
