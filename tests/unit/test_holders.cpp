// Holders a reader can tell apart (tools/report/analysis/holders.h): holders that name the same
// frame get their callers up to the first one that differs, and no more.
#include <doctest/doctest.h>

#include "report_frames.h"
#include "tools/report/analysis/holders.h"

using namespace gg::report;
using gg::testing::native;
using gg::testing::py;

using Chain = std::vector<std::string>;

TEST_CASE("holders: two chains that share their first frame are told apart by the next one") {
    std::vector<std::string> out = tell_apart({{"alloc (a.py:1)", "leak (a.py:9)", "main (a.py:20)"},
                                               {"alloc (a.py:1)", "setup (a.py:5)", "main (a.py:21)"}});
    CHECK(out[0] == "alloc (a.py:1) ← leak (a.py:9)");
    CHECK(out[1] == "alloc (a.py:1) ← setup (a.py:5)");
}

TEST_CASE("holders: a chain alone with its first frame stays one frame") {
    std::vector<std::string> out = tell_apart({{"alloc (a.py:1)", "leak (a.py:9)"}, {"other (b.py:2)", "x (b.py:3)"}});
    CHECK(out[0] == "alloc (a.py:1)");
    CHECK(out[1] == "other (b.py:2)");
}

TEST_CASE("holders: of three, two sharing three frames go on to the fourth, the third stops at the second") {
    Chain a = {"f0", "f1", "f2", "a3", "main"};
    Chain b = {"f0", "f1", "f2", "b3", "main"};
    Chain c = {"f0", "c1", "f2", "a3", "main"};
    std::vector<std::string> out = tell_apart({a, b, c});
    CHECK(out[0] == "f0 ← f1 ← f2 ← a3");
    CHECK(out[1] == "f0 ← f1 ← f2 ← b3");
    CHECK(out[2] == "f0 ← c1");
}

TEST_CASE("holders: identical chains stay one line, and a chain that is another's start ends whole") {
    Chain a = {"alloc (a.py:1)", "step (a.py:9)"};
    std::vector<std::string> same = tell_apart({a, a});
    CHECK(same[0] == "alloc (a.py:1)");
    CHECK(same[1] == "alloc (a.py:1)");
    std::vector<std::string> prefix = tell_apart({a, {"alloc (a.py:1)", "step (a.py:9)", "main (a.py:30)"}});
    CHECK(prefix[0] == "alloc (a.py:1) ← step (a.py:9)");
    CHECK(prefix[1] == "alloc (a.py:1) ← step (a.py:9) ← main (a.py:30)");
}

TEST_CASE("holders: a chain longer than the cap keeps its first frames, an ellipsis and the frame that differs") {
    Chain a = {"f0", "f1", "f2", "f3", "f4", "f5", "f6", "a7"};
    Chain b = {"f0", "f1", "f2", "f3", "f4", "f5", "f6", "b7"};
    std::vector<std::string> out = tell_apart({a, b}, 6);
    CHECK(out[0] == "f0 ← f1 ← f2 ← f3 ← … ← a7");
    CHECK(out[1] == "f0 ← f1 ← f2 ← f3 ← … ← b7");
    // At the cap exactly, nothing is cut.
    std::vector<std::string> at_cap = tell_apart({{"f0", "f1", "f2", "f3", "x4"}, {"f0", "f1", "f2", "f3", "f4"}}, 5);
    CHECK(at_cap[0] == "f0 ← f1 ← f2 ← f3 ← x4");
    CHECK(at_cap[1] == "f0 ← f1 ← f2 ← f3 ← f4");
}

TEST_CASE("holders: a stack's chain is its best frame, then the callers of its kind outward") {
    Stack s{
        "s",
        {native("/usr/lib/libcuda.so.1", "cuMemAlloc_v2"), native("/lib/libffi.so.8", "ffi_call"),
         py("/work/demo.py", "device_alloc", 13), py("/work/demo.py", "forward", 25), py("/work/demo.py", "main", 39)}};
    CHECK(caller_chain(s) ==
          Chain{"device_alloc (work/demo.py:13)", "forward (work/demo.py:25)", "main (work/demo.py:39)"});
    Stack c{"c",
            {native("/usr/lib/libgpuguard.so", "hook"), native("/work/app", "alloc_buffer"),
             native("/usr/lib/libcudart.so.13", "cudaMalloc"), native("/work/app", "main")}};
    CHECK(caller_chain(c) == Chain{"alloc_buffer (app)", "main (app)"});
}

TEST_CASE("holders: a report's holders that share where_label get their callers, the others keep it") {
    Report r;
    r.stacks["w"] = {"w",
                     {py("/work/demo.py", "device_alloc", 13), py("/work/demo.py", "Model.__init__", 21),
                      py("/work/demo.py", "main", 35)}};
    r.stacks["o"] = {"o",
                     {py("/work/demo.py", "device_alloc", 13), py("/work/demo.py", "Model.__init__", 22),
                      py("/work/demo.py", "main", 35)}};
    r.stacks["l"] = {"l",
                     {py("/work/demo.py", "device_alloc", 13), py("/work/demo.py", "Model.forward", 25),
                      py("/work/demo.py", "main", 39)}};
    r.stacks["x"] = {"x", {py("/work/other.py", "load", 7), py("/work/demo.py", "main", 30)}};
    std::vector<std::string> labels = holder_labels(r, {"l", "w", "o", "x", "missing"});
    CHECK(labels[0] == "device_alloc (work/demo.py:13) ← Model.forward (work/demo.py:25)");
    CHECK(labels[1] == "device_alloc (work/demo.py:13) ← Model.__init__ (work/demo.py:21)");
    CHECK(labels[2] == "device_alloc (work/demo.py:13) ← Model.__init__ (work/demo.py:22)");
    CHECK(labels[3] == "load (work/other.py:7)");
    CHECK(labels[4] == "[unknown stack]");
}

TEST_CASE("holders: under a library frame, the program's own caller that where_label named stays on the line") {
    // Two convolutions from the same line of the program, one through Module.__call__ (_call_impl):
    // they differ inside torch, before the program's frame.
    const std::string conv = "/venv/site-packages/torch/nn/modules/conv.py";
    const std::string module = "/venv/site-packages/torch/nn/modules/module.py";
    Report r;
    r.stacks["a"] = {"a",
                     {py(conv, "_conv_forward", 549), py(conv, "forward", 554), py(module, "_call_impl", 1762),
                      py("/work/model.py", "forward", 34), py("/work/train.py", "step", 55)}};
    r.stacks["b"] = {"b",
                     {py(conv, "_conv_forward", 549), py(conv, "forward", 554), py("/work/model.py", "forward", 34),
                      py("/work/train.py", "step", 55)}};
    REQUIRE(where_label(r, "a") == where_label(r, "b"));
    std::vector<std::string> labels = holder_labels(r, {"a", "b"});
    CHECK(labels[0] ==
          "_conv_forward (torch/nn/modules/conv.py:549) ← forward (torch/nn/modules/conv.py:554) ← _call_impl "
          "(torch/nn/modules/module.py:1762) ← forward (work/model.py:34)");
    CHECK(labels[1] ==
          "_conv_forward (torch/nn/modules/conv.py:549) ← forward (torch/nn/modules/conv.py:554) ← forward "
          "(work/model.py:34)");
    // Frames between the last one shown and the program's are marked as left out.
    r.stacks["a"].frames.insert(r.stacks["a"].frames.begin() + 3, py(module, "_wrapped_call_impl", 1751));
    CHECK(holder_labels(r, {"a", "b"})[0] ==
          "_conv_forward (torch/nn/modules/conv.py:549) ← forward (torch/nn/modules/conv.py:554) ← _call_impl "
          "(torch/nn/modules/module.py:1762) ← … ← forward (work/model.py:34)");
}

TEST_CASE("holders: told_apart changes only the labels two holders share, and keeps their program frame") {
    std::vector<std::string> labels =
        told_apart({"lib (site/x.py:1) ← run (app.py:5)", "lib (site/x.py:1) ← run (app.py:5)", "other (app.py:9)"},
                   {{"lib (site/x.py:1)", "a (site/y.py:2)", "run (app.py:5)"},
                    {"lib (site/x.py:1)", "b (site/y.py:3)", "run (app.py:5)"},
                    {"other (app.py:9)"}});
    CHECK(labels[0] == "lib (site/x.py:1) ← a (site/y.py:2) ← run (app.py:5)");
    CHECK(labels[1] == "lib (site/x.py:1) ← b (site/y.py:3) ← run (app.py:5)");
    CHECK(labels[2] == "other (app.py:9)");
}
