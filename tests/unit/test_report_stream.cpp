// The report written as it is made (shim/report/json_out.h): the same text as nlohmann's dump of the
// same document, and a report that cannot be written whole (a full disk, a file size limit) leaves no
// file behind, only one line naming it.
#include <doctest/doctest.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "core_fixture.h"
#include "shim/report/json_out.h"
#include "shim/report/report.h"

using namespace gg;
using nlohmann::json;

TEST_CASE("report stream: the text is nlohmann's dump(1) of the same document") {
    json row = json::array({1, "a\"b\nc", nullptr, -5, std::string("\xff\xfe latin", 8)});
    json doc = {{"a", json::object()},
                {"b", json::array()},
                {"c", {{"d", {1, 2}}, {"e", {{"f", true}}}}},
                {"rows", {row, row}},
                {"z", "end"}};
    std::string text;
    report::JsonOut out(&text);
    out.begin_object();
    out.begin_object("a");
    out.end_object();
    out.begin_array("b");
    out.end_array();
    out.value("c", doc["c"]);
    out.begin_array("rows");
    out.item(row);
    out.item(row);
    out.end_array();
    out.value("z", "end");
    out.end_object();
    REQUIRE(out.finish());
    CHECK(text == doc.dump(1, ' ', false, json::error_handler_t::replace));
}

TEST_CASE("report stream: a write that fails says why, and nothing more is written") {
    int fd = open("/dev/full", O_WRONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    report::JsonOut out(fd);
    out.begin_array();
    for (int i = 0; i < 100000; i++) out.item(i);  // past the 64 KiB buffer: written, and refused
    out.end_array();
    CHECK_FALSE(out.finish());
    CHECK(out.why() == strerror(ENOSPC));
    close(fd);
}

// In a child: a file size limit below the report's size makes its writes fail part way (EFBIG), as a
// full disk does. Exit status: a bit per failed expectation.
TEST_CASE("report stream: a report cut short by its file system leaves no file, and one line naming it") {
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        gg::testing::Core core;
        char err_path[] = "/tmp/gg-stream-err-XXXXXX";
        int err = mkstemp(err_path);
        dup2(err, 2);
        signal(SIGXFSZ, SIG_IGN);
        rlimit small{4096, 4096};
        setrlimit(RLIMIT_FSIZE, &small);
        std::string path = report::write(report::Reason::kRequest, std::string(20000, 'y'), nullptr, 0);
        int files = 0;
        if (DIR *d = opendir(state().cfg->report_dir.c_str())) {
            while (dirent *e = readdir(d)) files += e->d_name[0] != '.' || strstr(e->d_name, ".tmp") ? 1 : 0;
            closedir(d);
        }
        char text[4096] = {};
        pread(err, text, sizeof text - 1, 0);
        unlink(err_path);
        std::string line(text),
            want = "gpuguard: cannot write report " + state().cfg->report_dir + "/gpuguard-request-";
        int status = (path.empty() ? 0 : 1) | (files == 0 ? 0 : 2) | (line.rfind(want, 0) == 0 ? 0 : 4) |
                     (line.find(strerror(EFBIG)) != std::string::npos ? 0 : 8) |
                     (std::count(line.begin(), line.end(), '\n') == 1 ? 0 : 16);
        _exit(status);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    int bits = WEXITSTATUS(status);
    CHECK_MESSAGE((bits & 1) == 0, "write() returned a path");
    CHECK_MESSAGE((bits & 2) == 0, "a file (or the temporary one) was left in the report folder");
    CHECK_MESSAGE((bits & 4) == 0, "no 'gpuguard: cannot write report PATH' line");
    CHECK_MESSAGE((bits & 8) == 0, "the line does not say why (File too large)");
    CHECK_MESSAGE((bits & 16) == 0, "not exactly one line");
}
