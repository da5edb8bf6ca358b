#!/usr/bin/python3
# Runs rdma-core's test suite (third_party/rdma-core-tests/tests, as its run_tests.py does:
# same argument parser, same load_tests protocol) and prints one machine-readable line per
# test, so crates/softroce-cli/tests/pyverbs.rs can compare the outcome with the known state:
#   START <id>
#   RESULT <id> <ok|skip|fail|error|xfail|upass> <reason, one line>
# A test that outlives --per-test-timeout is a hang: faulthandler's watchdog thread (it
# runs even while the test blocks inside a C call) prints every thread's stack and exits
# the process, leaving START without RESULT.
# Usage: run_suite.py SUITE_DIR [--per-test-timeout S] [run_tests.py arguments: --gid 1 ...]
import faulthandler
import os
import sys
import unittest
from importlib.machinery import SourceFileLoader

suite_dir = os.path.abspath(sys.argv[1])
timeout = 60.0
rest = sys.argv[2:]
if rest[:1] == ['--per-test-timeout']:
    timeout = float(rest[1])
    rest = rest[2:]
sys.argv = [os.path.join(suite_dir, 'run_tests.py')] + rest
sys.path.insert(0, suite_dir)

from args_parser import parser  # noqa: E402  (the suite's own parser, after sys.path)

tests = SourceFileLoader('tests', os.path.join(suite_dir, '__init__.py')).load_module()
parser.parse_args()


def line(text):
    # One line each, even when a reason spans several.
    return ' '.join(str(text).split())


class Result(unittest.TextTestResult):
    def startTest(self, test):
        print('START', test.id(), flush=True)
        faulthandler.dump_traceback_later(timeout, exit=True)
        super().startTest(test)

    def stopTest(self, test):
        faulthandler.cancel_dump_traceback_later()
        super().stopTest(test)

    def _report(self, test, outcome, reason=''):
        print('RESULT', test.id(), outcome, line(reason), flush=True)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._report(test, 'ok')

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._report(test, 'skip', reason)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._report(test, 'fail', err[1])

    def addError(self, test, err):
        super().addError(test, err)
        self._report(test, 'error', err[1])

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._report(test, 'xfail', err[1])

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._report(test, 'upass')


suite = unittest.TestLoader().loadTestsFromModule(tests)
runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=1, resultclass=Result)
result = runner.run(suite)
sys.exit(0 if result.wasSuccessful() else 1)
