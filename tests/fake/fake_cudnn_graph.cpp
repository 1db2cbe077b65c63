// Test double of cuDNN 9's libcudnn_graph.so.9 (see fake_cudnn.h): handles and the backend API,
// enough of it for one shape of plan: ENGINE (CUDNN_ATTR_ENGINE_GLOBAL_INDEX) -> ENGINECFG
// (CUDNN_ATTR_ENGINECFG_ENGINE) -> EXECUTION_PLAN (HANDLE, ENGINE_CONFIG), executed with a
// VARIANT_PACK whose CUDNN_ATTR_VARIANT_PACK_WORKSPACE may be null. Other attributes are accepted
// and ignored. As in cuDNN, a plan knows its workspace size only once finalized. Execute without a
// workspace takes one from the driver and keeps it with the handle until cudnnDestroy, as a library
// with an internal scratch pool would, so that allocations made inside a cuDNN call can be seen.
#include <mutex>
#include <vector>

#include "fake_cudnn.h"

#pragma GCC visibility push(default)
#include <cudnn.h>
#pragma GCC visibility pop

struct cudnnContext {
    std::mutex mu;
    std::vector<CUdeviceptr> scratch;
};

namespace {

struct Desc {
    cudnnBackendDescriptorType_t type;
    bool finalized = false;
    int64_t engine_index = -1;  // ENGINE
    Desc *engine = nullptr;     // ENGINECFG
    Desc *config = nullptr;     // EXECUTION_PLAN
    cudnnHandle_t handle = nullptr;
    int64_t workspace = 0;          // EXECUTION_PLAN, once finalized
    void *workspace_ptr = nullptr;  // VARIANT_PACK
};

Desc *as_desc(cudnnBackendDescriptor_t d) { return static_cast<Desc *>(d); }

const std::vector<uint64_t> &plan_workspaces() {
    static const std::vector<uint64_t> v = fake_cudnn::sizes_from_env("FAKE_CUDNN_PLAN_WORKSPACES");
    return v;
}

cudnnStatus_t finalize_plan(Desc *p) {
    if (!p->config || !p->config->engine || p->config->engine->engine_index < 0) return CUDNN_STATUS_BAD_PARAM;
    int64_t i = p->config->engine->engine_index;
    if (i >= (int64_t)plan_workspaces().size()) {
        fake_cudnn::trace("cudnnBackendFinalize plan on engine %lld -> NOT_SUPPORTED", (long long)i);
        return CUDNN_STATUS_NOT_SUPPORTED;
    }
    p->workspace = (int64_t)plan_workspaces()[(size_t)i];
    p->finalized = true;
    fake_cudnn::trace("cudnnBackendFinalize plan on engine %lld, workspace %lld", (long long)i,
                      (long long)p->workspace);
    if (fake_cudnn::env_flag("FAKE_CUDNN_CALLBACK")) {
        // Ask the plan's size through the public API, as code calling its own library's exports does.
        auto get = fake_cudnn::public_api<decltype(&::cudnnBackendGetAttribute)>("cudnnBackendGetAttribute");
        int64_t n = 0, ws = -1;
        if (!get ||
            get(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws) != CUDNN_STATUS_SUCCESS ||
            ws != p->workspace)
            return CUDNN_STATUS_INTERNAL_ERROR;
    }
    return CUDNN_STATUS_SUCCESS;
}

}  // namespace

cudnnStatus_t CUDNNWINAPI cudnnCreate(cudnnHandle_t *h) {
    if (!h) return CUDNN_STATUS_BAD_PARAM;
    *h = new cudnnContext;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnDestroy(cudnnHandle_t h) {
    if (!h) return CUDNN_STATUS_BAD_PARAM;
    for (CUdeviceptr p : h->scratch)
        if (fake_cudnn::driver().free) fake_cudnn::driver().free(p);
    delete h;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t *d) {
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    Desc *desc = new Desc;
    desc->type = type;
    *d = desc;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t d) {
    delete as_desc(d);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnBackendSetAttribute(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                                                   cudnnBackendAttributeType_t type, int64_t count,
                                                   const void *values) {
    Desc *desc = as_desc(d);
    if (!desc || desc->finalized || count < 1 || !values) return CUDNN_STATUS_BAD_PARAM;
    switch (name) {
        case CUDNN_ATTR_ENGINE_GLOBAL_INDEX:
            if (type != CUDNN_TYPE_INT64) return CUDNN_STATUS_BAD_PARAM;
            desc->engine_index = *static_cast<const int64_t *>(values);
            break;
        case CUDNN_ATTR_ENGINECFG_ENGINE:
            if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
            desc->engine = as_desc(*static_cast<const cudnnBackendDescriptor_t *>(values));
            break;
        case CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG:
            if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
            desc->config = as_desc(*static_cast<const cudnnBackendDescriptor_t *>(values));
            break;
        case CUDNN_ATTR_EXECUTION_PLAN_HANDLE:
            if (type != CUDNN_TYPE_HANDLE) return CUDNN_STATUS_BAD_PARAM;
            desc->handle = *static_cast<const cudnnHandle_t *>(values);
            break;
        case CUDNN_ATTR_VARIANT_PACK_WORKSPACE:
            if (type != CUDNN_TYPE_VOID_PTR) return CUDNN_STATUS_BAD_PARAM;
            desc->workspace_ptr = *static_cast<void *const *>(values);
            break;
        default: break;
    }
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnBackendFinalize(cudnnBackendDescriptor_t d) {
    Desc *desc = as_desc(d);
    if (!desc || desc->finalized) return CUDNN_STATUS_BAD_PARAM;
    if (desc->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) return finalize_plan(desc);
    desc->finalized = true;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnBackendGetAttribute(cudnnBackendDescriptor_t const d, cudnnBackendAttributeName_t name,
                                                   cudnnBackendAttributeType_t type, int64_t requested, int64_t *count,
                                                   void *values) {
    Desc *desc = as_desc(d);
    if (!desc) return CUDNN_STATUS_BAD_PARAM;
    if (name != CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE) return CUDNN_STATUS_NOT_SUPPORTED;
    // As in cuDNN, asking a descriptor of another type for a plan attribute is an error.
    if (desc->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || type != CUDNN_TYPE_INT64 || requested < 1 || !values)
        return CUDNN_STATUS_BAD_PARAM;
    if (!desc->finalized) return CUDNN_STATUS_NOT_INITIALIZED;
    *static_cast<int64_t *>(values) = desc->workspace;
    if (count) *count = 1;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnBackendExecute(cudnnHandle_t h, cudnnBackendDescriptor_t plan,
                                              cudnnBackendDescriptor_t pack) {
    Desc *p = as_desc(plan);
    Desc *v = as_desc(pack);
    if (!h || !p || !v || p->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || !p->finalized)
        return CUDNN_STATUS_BAD_PARAM;
    if (p->workspace > 0 && !v->workspace_ptr) {
        const fake_cudnn::Driver &drv = fake_cudnn::driver();
        CUdeviceptr scratch = 0;
        CUresult r = drv.alloc ? drv.alloc(&scratch, (size_t)p->workspace) : CUDA_ERROR_NOT_FOUND;
        fake_cudnn::trace("cudnnBackendExecute: scratch of %lld from the driver -> %d", (long long)p->workspace,
                          (int)r);
        if (r != CUDA_SUCCESS) return CUDNN_STATUS_ALLOC_FAILED;
        std::lock_guard<std::mutex> lock(h->mu);
        h->scratch.push_back(scratch);
    }
    fake_cudnn::trace("cudnnBackendExecute plan workspace %lld", (long long)p->workspace);
    return CUDNN_STATUS_SUCCESS;
}
