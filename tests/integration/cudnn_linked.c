/* cudnn_app.h, linked against libcudnn.so.9 and libcuda.so.1 (see there). */
#define CUDNN_APP_LINKED 1
#include "cudnn_app.h"
