// The module's import binds the CUDA libraries first (cuda_dispatch.c) and, where none of a supported major can be
// found, fails with that one line as its ImportError: OpenEquivariance reports it where it reports any failure to
// load its precompiled extension. OEq's own init function is compiled under another name
// (-DPyInit_<module>=OEQ_GUARD_INNER_INIT) and called here, unchanged.
#include <Python.h>

extern "C" const char *oeq_cuda_dispatch_bind(void);
extern "C" PyObject *OEQ_GUARD_INNER_INIT(void);

extern "C" PyMODINIT_FUNC OEQ_GUARD_MODULE_INIT(void) {
    if (const char *why = oeq_cuda_dispatch_bind()) {
        PyErr_SetString(PyExc_ImportError, why);
        return nullptr;
    }
    return OEQ_GUARD_INNER_INIT();
}
