"""The service wing's fixtures: ``postgres_server`` (a module's PostgreSQL server, started on first
use, or the test skipped saying why; hostilekit.py), given to every test file of tests/service/
without an import. The helpers the files share stay in modules of tests/ (hostilekit.py,
servicekit.py, services.py, pagekit.py, uploadstorm.py, loadworker.py): pytest imports each
folder's conftest.py under the one name ``conftest``, so nothing is imported from here."""
from hostilekit import postgres_server  # noqa: F401  the fixture
