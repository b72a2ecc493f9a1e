"""skein's Java driver and master, built once more with what a TonY job needs of YARN.

skein submits every application with the type ``skein``, refuses to report on or kill an
application of another type, its web UI (the application's tracking URL) opens on skein's own
overview, its master unregisters with no final tracking URL, and asks the ResourceManager for
containers only at its next heartbeat, up to five seconds after they were asked of it. A TonY job
wants the type ``TONY`` (``tony.application.type``), its own page behind its tracking URL while
it runs and the history server's page once it ended, and its gang asked for the moment its turn
comes.

So, once per machine and skein version, skein's own Java sources (from its source distribution on
the package index, or the file ``TONY_SKEIN_SDIST`` names) get small changes, the three classes
are compiled against the installed ``skein.jar`` and the cluster's own Hadoop classes (``yarn
classpath --glob``, as skein runs its driver), and a copy of ``skein.jar`` with them is kept in the
cache (``~/.cache/tony-workflow/skein-<version>-<revision>/``). The changes:

* the driver takes the application type from a tag ``yarn.application-type=<type>`` (not passed
  on to YARN), and knows an application of another type by TonY's tag ``tony`` as its own when
  asked to report on it, list it or kill it;
* the web UI's home page is the path the key-value store holds under :data:`UI_HOME_KEY` (the
  job's page, which skein's UI proxies), else skein's overview: the tracking URL, through the
  ResourceManager's proxy, opens the job's page, and the UI's other pages (TensorBoard's) stay
  where they were;
* the master unregisters with the URL the key-value store holds under
  :data:`FINAL_TRACKING_URL_KEY`, and heartbeats as soon as the containers asked of it stop
  coming (:data:`ASK_QUIET_MS`: a gang's requests reach the ResourceManager together).

The driver uploads the jar it runs from for the master, so one jar changes both. Where it cannot
be built (no JDK, no ``yarn`` command, the index out of reach) skein's own jar is used, as before,
and the reason is logged: jobs run as they did, of type ``skein``. ``TONY_SKEIN_JAR`` names a jar
to use instead (one built on another machine), or ``skein`` for skein's own.
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import threading
import zipfile
from pathlib import Path
from urllib.parse import urljoin

from ...process import file_lock

__all__ = ["ASK_GATHER_MS", "ASK_QUIET_MS", "FINAL_TRACKING_URL_KEY", "KNOWN_SDISTS", "REVISION", "TYPE_TAG", "UI_HOME_KEY", "PatchError", "driver_jar",
           "patch_driver", "patch_master", "patch_ui", "stock_jar", "type_tag"]

log = logging.getLogger("tony.yarn")

#: Changes whenever the changes below do: a new revision is built anew.
REVISION = "tony4"
#: The key-value store's key of the path skein's web UI sends its home page to: the tracking URL
#: while the application runs leads there.
UI_HOME_KEY = "yarn.ui-home"
#: The key-value store's key of the tracking URL the master unregisters with.
FINAL_TRACKING_URL_KEY = "yarn.final-tracking-url"
#: The tag the patched driver turns into the application's type.
TYPE_TAG = "yarn.application-type="
#: The master's heartbeat after a container is asked of it waits this long without another ask (a
#: gang's requests come one after another), and at most :data:`ASK_GATHER_MS`.
ASK_QUIET_MS = 200
ASK_GATHER_MS = 1000
_JAVA_DIR = "java/src/main/java/com/anaconda/skein/"
_CLASSES = ("Driver", "ApplicationMaster", "WebUI")
_INDEX = "https://pypi.org/simple"
#: The sha256 of skein's source archives known here, by version.
KNOWN_SDISTS = {"0.8.2": "9d74eab09357fcbc008253dc3d99267583df17ebc32cdfa735d65a0c54eb1f31"}


class PatchError(RuntimeError):
    """skein's sources are not those the changes were written for."""


class _Missing(OSError):
    """A tool the build needs is not here (yet): asked again at the next driver's start."""


def type_tag(application_type: str) -> str:
    """The tag that gives an application its YARN type through the patched driver."""
    return f"{TYPE_TAG}{application_type}"


def _once(text: str, old: str, new: str, where: str) -> str:
    n = text.count(old)
    if n != 1:
        raise PatchError(f"{where}: expected one {old.strip()[:60]!r}, found {n}")
    return text.replace(old, new)


_DRIVER_HELPERS = '''
  // tony-workflow: the application's type comes from a tag TYPE_TAG + type, which YARN does not
  // get; an application of another type is known as skein's by TonY's tag "tony".
  private static final String TYPE_TAG = "%(tag)s";

  static String applicationType(java.util.Set<String> tags) {
    if (tags != null) {
      for (String tag : tags) {
        if (tag.startsWith(TYPE_TAG) && tag.length() > TYPE_TAG.length()) {
          return tag.substring(TYPE_TAG.length());
        }
      }
    }
    return "skein";
  }

  static java.util.Set<String> applicationTags(java.util.Set<String> tags) {
    java.util.Set<String> out = new java.util.HashSet<String>();
    if (tags != null) {
      for (String tag : tags) {
        if (!tag.startsWith(TYPE_TAG)) {
          out.add(tag);
        }
      }
    }
    return out;
  }

  static boolean isSkeinApplication(ApplicationReport report) {
    return "skein".equals(report.getApplicationType())
        || (report.getApplicationTags() != null && report.getApplicationTags().contains("tony"));
  }
'''


def patch_driver(text: str) -> str:
    """skein's ``Driver.java`` with the application type taken from :data:`TYPE_TAG`."""
    w = "Driver.java"
    text = _once(text, "public class Driver {\n", "public class Driver {\n" + _DRIVER_HELPERS % {"tag": TYPE_TAG}, w)
    text = _once(text, 'appContext.setApplicationType("skein");',
                 "appContext.setApplicationType(applicationType(spec.getTags()));", w)
    text = _once(text, "appContext.setApplicationTags(spec.getTags());",
                 "appContext.setApplicationTags(applicationTags(spec.getTags()));", w)
    text = _once(text, 'new HashSet<String>(Arrays.asList("skein")), states);', "null, states);", w)
    text = _once(text, "      for (ApplicationReport report : reports) {\n",
                 "      for (ApplicationReport report : reports) {\n"
                 "        if (!isSkeinApplication(report)) {\n          continue;\n        }\n", w)
    return _once(text, '!report.getApplicationType().equals("skein")', "!isSkeinApplication(report)", w)


_MASTER_HELPERS = '''
  // tony-workflow: the allocator heartbeats at once when a container is asked for; the final
  // tracking URL comes from the key-value store.
  private static final String FINAL_TRACKING_URL_KEY = "%(final)s";
  private final Object allocatorWake = new Object();
  private boolean allocatorWoken = false;
  private long lastAsk = 0;
  private long wokenAt = 0;

  private void wakeAllocator() {
    synchronized (allocatorWake) {
      long now = System.currentTimeMillis();
      if (!allocatorWoken) {
        wokenAt = now;
      }
      allocatorWoken = true;
      lastAsk = now;
      allocatorWake.notifyAll();
    }
  }

  // Sleeps until the heartbeat is due or a container was asked for; asks that come one after
  // another (a gang's, one request each) are let in together: the heartbeat waits for
  // ASK_QUIET_MS without a new one (but never more than ASK_GATHER_MS), as a gang asked for in
  // part may be granted in part.
  private static final long ASK_QUIET_MS = %(quiet)d;
  private static final long ASK_GATHER_MS = %(gather)d;

  private void sleepUnlessWoken(long millis) throws InterruptedException {
    long until = System.currentTimeMillis() + millis;
    synchronized (allocatorWake) {
      while (true) {
        long now = System.currentTimeMillis();
        long wait;
        if (allocatorWoken) {
          wait = Math.min(lastAsk + ASK_QUIET_MS, wokenAt + ASK_GATHER_MS) - now;
        } else {
          wait = until - now;
        }
        if (wait <= 0) {
          break;
        }
        allocatorWake.wait(wait);
      }
      allocatorWoken = false;
    }
  }

  private String kvString(String key) {
    synchronized (keyValueStore) {
      Msg.KeyValue.Builder kv = keyValueStore.get(key);
      String value = (kv == null) ? "" : kv.getValue().toStringUtf8().trim();
      return value.isEmpty() ? null : value;
    }
  }
'''


def patch_master(text: str) -> str:
    """skein's ``ApplicationMaster.java`` with the final tracking URL and the prompt heartbeat."""
    w = "ApplicationMaster.java"
    field = "  private final long pendingHeartbeat = Math.min(1000, idleHeartbeat);\n"
    text = _once(text, field, field + _MASTER_HELPERS % {"final": FINAL_TRACKING_URL_KEY, "quiet": ASK_QUIET_MS,
                                                           "gather": ASK_GATHER_MS}, w)
    # Hadoop 3's default expiry is a long.
    text = _once(text, "conf.getInt(YarnConfiguration.RM_AM_EXPIRY_INTERVAL_MS,",
                 "conf.getLong(YarnConfiguration.RM_AM_EXPIRY_INTERVAL_MS,", w)
    text = _once(text, "                Thread.sleep(left);", "                sleepUnlessWoken(left);", w)
    text = _once(text, "      rmClient.addContainerRequest(req);\n",
                 "      rmClient.addContainerRequest(req);\n      wakeAllocator();\n", w)
    return _once(text, "rmClient.unregisterApplicationMaster(finalStatus, finalMessage, null);",
                 "rmClient.unregisterApplicationMaster(finalStatus, finalMessage, kvString(FINAL_TRACKING_URL_KEY));", w)


_UI_HOME = '''
    RedirectPatternRule redirect = new RedirectPatternRule() {
      // tony-workflow: the home page is the one the key-value store names, else the overview.
      @Override
      public String apply(String target, HttpServletRequest request, HttpServletResponse response)
          throws IOException {
        String home = null;
        synchronized (keyValueStore) {
          Msg.KeyValue.Builder kv = keyValueStore.get("%(home)s");
          if (kv != null) {
            home = kv.getValue().toStringUtf8().trim();
          }
        }
        response.sendRedirect(response.encodeRedirectURL(
            (home == null || !home.startsWith("/")) ? "/overview" : home));
        return target;
      }
    };
'''


def patch_ui(text: str) -> str:
    """skein's ``WebUI.java`` with its home page (the tracking URL's) named by :data:`UI_HOME_KEY`."""
    w = "WebUI.java"
    text = _once(text, "    RedirectPatternRule redirect = new RedirectPatternRule();\n", _UI_HOME % {"home": UI_HOME_KEY}, w)
    return _once(text, '    redirect.setLocation("/overview");\n', "", w)


def _shaded(text: str) -> str:
    """The imports of the libraries skein's jar carries under its own package."""
    return re.sub(r"^import (static )?(com\.google\.|io\.grpc\.|io\.netty\.|org\.eclipse\.jetty\.|com\.github\.mustachejava\.)",
                  r"import \1com.anaconda.skein.shaded.\2", text, flags=re.MULTILINE)


def _cache_root() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return cache / "tony-workflow"




def _sdist(version: str) -> bytes:
    """skein's source distribution: the file ``TONY_SKEIN_SDIST`` names, else the package index's
    (``PIP_INDEX_URL``'s, else PyPI's simple index), checked against the digest its link gives."""
    given = os.environ.get("TONY_SKEIN_SDIST")
    if given:
        return Path(given).expanduser().read_bytes()
    import requests
    index = (os.environ.get("PIP_INDEX_URL") or _INDEX).rstrip("/")
    page = requests.get(f"{index}/skein/", timeout=30)
    page.raise_for_status()
    name = f"skein-{version}.tar.gz"
    links = [h for h in re.findall(r'href="([^"]+)"', page.text) if h.split("#")[0].endswith("/" + name) or h.startswith(name)]
    if not links:
        raise OSError(f"the package index {index} has no {name}")
    url, _, fragment = links[0].replace("&amp;", "&").partition("#")
    got = requests.get(urljoin(page.url, url), timeout=120)
    got.raise_for_status()
    # A version whose archive is known here must be that archive (its Java runs in every job's
    # master); another, the one the index vouches for.
    digest = KNOWN_SDISTS.get(version) or dict(p.split("=", 1) for p in fragment.split("&") if "=" in p).get("sha256")
    if digest and hashlib.sha256(got.content).hexdigest() != digest:
        raise OSError(f"{name} from {index} is not the archive expected (sha256 {digest})")
    return got.content


def _sources(sdist: bytes) -> dict[str, str]:
    out = {}
    with tarfile.open(fileobj=io.BytesIO(sdist), mode="r:gz") as tar:
        for member in tar.getmembers():
            for name in _CLASSES:
                if member.name.endswith(f"/{_JAVA_DIR}{name}.java"):
                    f = tar.extractfile(member)
                    if f is not None:
                        out[name] = f.read().decode()
    missing = [n for n in _CLASSES if n not in out]
    if missing:
        raise PatchError(f"skein's source distribution lacks {', '.join(missing)}.java")
    return out


def _javac() -> str:
    home = os.environ.get("JAVA_HOME")
    javac = os.path.join(home, "bin", "javac") if home else shutil.which("javac")
    if not javac or not os.access(javac, os.X_OK):
        raise _Missing("no javac (a JDK) " + (f"in JAVA_HOME={home}" if home else "on PATH"))
    return javac


def _hadoop_classpath() -> str:
    yarn = shutil.which("yarn")
    if not yarn:
        raise _Missing("no `yarn` command on PATH")
    done = subprocess.run([yarn, "classpath", "--glob"], capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0 or not done.stdout.strip():
        raise OSError(f"`yarn classpath --glob` failed: {(done.stderr or done.stdout).strip()[-300:]}")
    return done.stdout.strip().splitlines()[-1]


def _build(stock: Path, version: str, out: Path) -> None:
    """Builds the patched jar ``out`` from skein ``version``'s sources and its ``stock`` jar."""
    javac, classpath = _javac(), _hadoop_classpath()  # the tools first: they cost nothing to look for
    sources = _sources(_sdist(version))
    patched = {"Driver": patch_driver(sources["Driver"]), "ApplicationMaster": patch_master(sources["ApplicationMaster"]),
               "WebUI": patch_ui(sources["WebUI"])}
    with tempfile.TemporaryDirectory(prefix="tony-skein-") as tmp:
        src, classes = Path(tmp) / "src", Path(tmp) / "classes"
        src.mkdir()
        classes.mkdir()
        for name, text in patched.items():
            (src / f"{name}.java").write_text(_shaded(text))
        done = subprocess.run([javac, "--release", "8", "-nowarn", "-encoding", "UTF-8", "-d", str(classes),
                               "-cp", f"{stock}:{classpath}",
                               *(str(src / f"{n}.java") for n in patched)],
                              capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            raise OSError(f"javac could not compile skein's patched classes: {(done.stdout + done.stderr).strip()[-800:]}")
        built = sorted(classes.rglob("*.class"))
        names = {p.relative_to(classes).as_posix() for p in built}
        replaced = re.compile(r"com/anaconda/skein/(Driver|ApplicationMaster|WebUI)(\$[^/]*)?\.class$")
        part = out.with_name(f".{out.name}.{os.getpid()}")
        with zipfile.ZipFile(stock) as src_jar, zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as dst:
            for item in src_jar.infolist():
                if not replaced.match(item.filename):
                    dst.writestr(item, src_jar.read(item.filename))
            for name in sorted(names):
                dst.write(classes / name, name)
        os.replace(part, out)


_CHOSEN: tuple[str, str | None] | None = None
_CHOSEN_LOCK = threading.Lock()


def driver_jar() -> tuple[str, str | None]:
    """(the jar skein's drivers start with, why it is skein's own or None when it is the patched
    one). Built once per machine (:func:`_build`), decided once per process."""
    global _CHOSEN
    with _CHOSEN_LOCK:
        if _CHOSEN is not None and Path(_CHOSEN[0]).is_file():
            return _CHOSEN
        chosen, final = _choose()
        if final:
            _CHOSEN = chosen
        return chosen


def stock_jar() -> str:
    """skein's own jar, where skein is installed (not ``skein.core._SKEIN_JAR``, which names the jar
    drivers start from: this one, once set)."""
    import skein
    return os.path.join(os.path.dirname(skein.__file__), "java", "skein.jar")


def _choose() -> tuple[tuple[str, str | None], bool]:
    import skein
    stock = stock_jar()
    given = os.environ.get("TONY_SKEIN_JAR", "").strip()
    if given == "skein":
        return (stock, "TONY_SKEIN_JAR=skein"), True
    if given:
        if not Path(given).is_file():
            return (stock, f"TONY_SKEIN_JAR={given} is no file"), True
        return (given, None), True
    version = skein.__version__
    out = _cache_root() / f"skein-{version}-{REVISION}" / "skein.jar"
    stamp = out.with_name("built.json")
    if out.is_file() and stamp.is_file():
        return (str(out), None), True
    try:
        with file_lock(out.with_name(".lock")):
            if not (out.is_file() and stamp.is_file()):
                log.info("building skein %s's driver and master with TonY's changes into %s (once)", version, out)
                _build(Path(stock), version, out)
                stamp.write_text(json.dumps({"skein": version, "revision": REVISION}))
    except (OSError, PatchError, subprocess.SubprocessError, tarfile.TarError, zipfile.BadZipFile) as e:
        why = f"skein's driver and master could not be built with TonY's changes ({e}): jobs are of type skein"
        log.warning("%s", why)
        return (stock, why), not isinstance(e, _Missing)
    except Exception as e:  # noqa: BLE001 - whatever failed, skein's own jar serves
        why = f"skein's driver and master could not be built with TonY's changes ({type(e).__name__}: {e}): " \
              "jobs are of type skein"
        log.warning("%s", why)
        return (stock, why), True
    return (str(out), None), True
