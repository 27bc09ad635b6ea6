#include "tools/eval/synthvid_generate.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <system_error>
#include <vector>

#include "common/logging.h"

extern char** environ;

namespace framezip::eval {
namespace {

namespace fs = std::filesystem;

constexpr char kGenerator[] = "tools/synthvid/synthvid.py";
constexpr char kGenerator2[] = "tools/synthvid/synthvid2.py";

int LineCount(const fs::path& file) {
  std::ifstream in(file);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.empty() ? 0 : 1;
  return n;
}

// Runs argv[0] (looked up in PATH) and returns its exit code, or -1 when it could not start.
// The child's stdout goes to our stderr (ours is reserved for results), or both to /dev/null.
int Run(const std::vector<std::string>& argv, bool quiet) {
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (quiet) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  } else {
    posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  }
  pid_t pid = -1;
  const int err = posix_spawnp(&pid, cargv[0], &actions, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The repository checkout that holds the generator: the current directory or one above it, or
// one above this executable (build/bin/framezip).
std::optional<fs::path> FindSourceRoot() {
  std::vector<fs::path> starts = {fs::current_path()};
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) starts.push_back(exe.parent_path());
  for (fs::path dir : starts) {
    for (; !dir.empty(); dir = dir.parent_path()) {
      if (fs::exists(dir / kGenerator, ec)) return dir;
      if (dir == dir.parent_path()) break;
    }
  }
  return std::nullopt;
}

// A Python that imports the generator's modules: $FRAMEZIP_PYTHON when set (only it), else the
// checkout's .venv, else Debian's python3 (python3-numpy, python3-av and python3-pil come with
// `make test`'s set-up, scripts/install-deps.sh), else python3 on the PATH.
std::optional<std::string> FindPython(const fs::path& root) {
  std::vector<std::string> candidates = {(root / ".venv/bin/python").string(), "/usr/bin/python3",
                                         "python3"};
  if (const char* env = std::getenv("FRAMEZIP_PYTHON"); env != nullptr && *env != '\0') {
    candidates = {env};  // an explicit choice is the only one tried
  }
  for (const std::string& py : candidates) {
    if (Run({py, "-c", "import numpy, av, PIL"}, /*quiet=*/true) == 0) return py;
  }
  return std::nullopt;
}

}  // namespace

int SynthvidSplitSize(std::string_view split) { return split == "train" ? 9000 : 600; }

fs::path DefaultSynthvidCacheDir() {
  fs::path base;
  if (const char* d = std::getenv("FRAMEZIP_CACHE_DIR"); d != nullptr && *d != '\0') {
    base = d;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    base = fs::path(x) / "framezip";
  } else if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') {
    base = fs::path(h) / ".cache/framezip";
  } else {
    base = fs::temp_directory_path() / "framezip-cache";
  }
  return base / "synthvid";
}

namespace {

// FindOrGenerateSynthvidSplit for the generator `generator` (a path in the checkout).
StatusOr<fs::path> FindOrGenerate(const fs::path& data_dir, std::string_view split, int count,
                                  const fs::path& generate_dir, const char* generator) {
  const std::string jsonl = std::string(split) + ".jsonl";
  std::error_code ec;
  if (fs::exists(data_dir / jsonl, ec)) return data_dir;
  if (fs::exists(generate_dir / jsonl, ec) && LineCount(generate_dir / jsonl) >= count) {
    return generate_dir;
  }
  const std::string how =
      fmt::format("scripts/python-env.sh && .venv/bin/python {} --split {} --count {} --out {}",
                  generator, split, count, data_dir.string());
  const std::optional<fs::path> root = FindSourceRoot();
  if (!root) {
    return FailedPreconditionError(
        "{} not found and {} is not reachable from here to generate it; in a framezip checkout "
        "run: {}",
        (data_dir / jsonl).string(), generator, how);
  }
  const std::optional<std::string> python = FindPython(*root);
  if (!python) {
    return FailedPreconditionError(
        "{} not found, and no Python with numpy, av and pillow to generate it (install Debian's "
        "python3-numpy python3-av python3-pil, set FRAMEZIP_PYTHON, or run from {}: {})",
        (data_dir / jsonl).string(), root->string(), how);
  }
  fs::create_directories(generate_dir, ec);
  if (ec) return InternalError("cannot create {}: {}", generate_dir.string(), ec.message());
  FZ_LOG_INFO("eval: generating {} items of the synthvid {} split into {} (one-time)", count, split,
              generate_dir.string());
  const int rc = Run({*python, (*root / generator).string(), "--split", std::string(split),
                      "--count", std::to_string(count), "--out", generate_dir.string()},
                     /*quiet=*/false);
  if (rc != 0) {
    return InternalError("{} {} --split {} --count {} --out {} failed (exit code {})", *python,
                         (*root / generator).string(), split, count, generate_dir.string(), rc);
  }
  return generate_dir;
}

}  // namespace

StatusOr<fs::path> FindOrGenerateSynthvidSplit(const fs::path& data_dir, std::string_view split,
                                               int count, const fs::path& generate_dir) {
  return FindOrGenerate(data_dir, split, count, generate_dir, kGenerator);
}

StatusOr<fs::path> FindOrGenerateSynthvid2Split(const fs::path& data_dir, std::string_view split,
                                                int count, const fs::path& generate_dir) {
  return FindOrGenerate(data_dir, split, count, generate_dir, kGenerator2);
}

}  // namespace framezip::eval
