/* lens_rl.offline.read._gpuscan: a strict scanner for GPU sample lines (optional; gpu_samples.py chooses).
 *
 * Why: a day of 2 Hz samples of 8 devices is 70 MB of JSON text per node, 64 numbers a line. Decoding it
 * as JSON makes a Python object per number (msgspec: 36-58 MB/s here); numpy's text parser reads ~120 MB/s.
 * This reads the one documented line shape straight into the caller's arrays, with no Python object:
 *
 *   {"t":<ns>,"d":[[v,v,v,v,v,v,v,v],...]}\n      (JSON white space anywhere between the tokens)
 *
 * one list per device, `null` for a device not read at that sample, each v a number or `null`.
 *
 * It takes only what it fully validates and whose value is certain to be what the pure-Python path reads:
 * `t` an integer of at most 19 digits below 2^63 (no sign, no leading zero, no fraction); each value `null`
 * or a JSON number with no sign, at most 15 significant digits, a decimal exponent (fraction and exponent
 * together) within 10^+-22 and a value below 10^15 (so Clinger's fast path makes it the correctly rounded
 * double, then the float32 cast rounds once, as `float(text)` then numpy's cast do); a line is taken
 * only where it is plausible too: `t` in [t_min, t_max), each counter of `percent` (a bit mask of the
 * counters' positions) at most 100 (no value is negative: no sign is taken). Every other line (a header,
 * another shape, a sign, a huge or long number, an implausible value, garbage) stops the scan: the caller
 * reads that line on its checked path (which skips it or reads it as the scanner would not) and calls
 * again after it.
 *
 *   scan(data, pos, devices, t_out, v_out, row, t_min, t_max, percent[, stride]) -> (row, pos)
 *
 * `data` bytes-like, `pos` the start of a line in it; `t_out` an int64 buffer, `v_out` a float32 buffer of
 * `devices * 8` values a row (or, with `stride` > 0, device by device: `devices` runs of `stride` rows of 8
 * values, each device's rows contiguous), both written from `row`. Lines are read while each is whole (ends with a
 * newline inside `data`), accepted and there is room; returns the next free row and where it stopped (the
 * start of the first line not taken, or len(data)). The GIL is released while scanning.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define COUNTERS 8
#define MAX_DEVICES 1024

static const double POW10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

#define SKIP_WS(p, end)                                                                                    \
    while ((p) < (end) && (*(p) == ' ' || *(p) == '\t' || *(p) == '\r'))                                   \
    (p)++

/* A value (`null` or a number as above) at p: where it ends, its value in *out; NULL where not taken. */
static const char *
value_at(const char *p, const char *end, float *out)
{
    if (p < end && *p == 'n') {
        if (end - p >= 4 && memcmp(p, "null", 4) == 0) {
            *out = NAN;
            return p + 4;
        }
        return NULL;
    }
    if (p >= end || *p < '0' || *p > '9') {
        return NULL;
    }
    uint64_t m = 0;
    int digits = 0; /* significant digits in m */
    int scale = 0;  /* the decimal exponent of m's last digit */
    int exact_int = 1;
    if (*p == '0') {
        p++;
        if (p < end && *p >= '0' && *p <= '9') {
            return NULL; /* (a leading zero: not JSON) */
        }
    }
    else {
        while (p < end && *p >= '0' && *p <= '9') {
            if (++digits > 15) {
                return NULL;
            }
            m = m * 10 + (uint64_t)(*p++ - '0');
        }
    }
    if (p < end && *p == '.') {
        exact_int = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') {
            return NULL;
        }
        while (p < end && *p >= '0' && *p <= '9') {
            if (m != 0 || *p != '0') {
                if (++digits > 15) {
                    return NULL;
                }
            }
            m = m * 10 + (uint64_t)(*p++ - '0');
            scale--;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        exact_int = 0;
        p++;
        int negative = 0;
        if (p < end && (*p == '+' || *p == '-')) {
            negative = *p == '-';
            p++;
        }
        if (p >= end || *p < '0' || *p > '9') {
            return NULL;
        }
        int exp = 0, exp_digits = 0;
        while (p < end && *p >= '0' && *p <= '9') {
            if (++exp_digits > 3) {
                return NULL;
            }
            exp = exp * 10 + (*p++ - '0');
        }
        scale += negative ? -exp : exp;
    }
    double value;
    if (exact_int || m == 0) {
        value = (double)m;
    }
    else if (scale >= 0 && scale <= 22) {
        value = (double)m * POW10[scale];
    }
    else if (scale < 0 && scale >= -22) {
        value = (double)m / POW10[-scale];
    }
    else {
        return NULL;
    }
    if (!(value < 1e15)) {
        return NULL;
    }
    *out = (float)value;
    return p;
}

/* One line from p (its newline at nl): 1 and the row written where it is taken, else 0. */
typedef struct {
    Py_ssize_t devices, step; /* step: floats from one device's values of a row to the next device's */
    long long t_min, t_max;
    unsigned int percent;
} Shape;

/* An object's key (`key`: its three bytes, quotes included) and its colon at p, blanks around: where its
   value begins (blanks skipped, before the line's end), NULL where not. */
static const char *
key_at(const char *p, const char *nl, const char *key)
{
    SKIP_WS(p, nl);
    if (nl - p < 3 || memcmp(p, key, 3) != 0) {
        return NULL;
    }
    p += 3;
    SKIP_WS(p, nl);
    if (p >= nl || *p++ != ':') {
        return NULL;
    }
    SKIP_WS(p, nl);
    return p < nl ? p : NULL;
}

static int
line_at(const char *p, const char *nl, const Shape *shape, int64_t *t_row, float *v_row)
{
    Py_ssize_t devices = shape->devices, step = shape->step;
    SKIP_WS(p, nl);
    if (p >= nl || *p != '{') {
        return 0;
    }
    p++;
    p = key_at(p, nl, "\"t\"");
    if (p == NULL || *p < '0' || *p > '9' || (*p == '0' && p + 1 < nl && p[1] >= '0' && p[1] <= '9')) {
        return 0;
    }
    uint64_t t = 0;
    int digits = 0;
    while (p < nl && *p >= '0' && *p <= '9') {
        if (++digits > 19) {
            return 0;
        }
        t = t * 10 + (uint64_t)(*p++ - '0');
    }
    if (t > (uint64_t)INT64_MAX || (long long)t < shape->t_min || (long long)t >= shape->t_max ||
        (p < nl && (*p == '.' || *p == 'e' || *p == 'E'))) {
        return 0;
    }
    SKIP_WS(p, nl);
    if (p >= nl || *p++ != ',') {
        return 0;
    }
    p = key_at(p, nl, "\"d\"");
    if (p == NULL) {
        return 0;
    }
    if (p >= nl || *p++ != '[') {
        return 0;
    }
    for (Py_ssize_t d = 0; d < devices; d++) {
        float *out = v_row + d * step;
        SKIP_WS(p, nl);
        if (d > 0) {
            if (p >= nl || *p++ != ',') {
                return 0;
            }
            SKIP_WS(p, nl);
        }
        if (p < nl && *p == 'n') { /* a device not read at this sample */
            if (nl - p < 4 || memcmp(p, "null", 4) != 0) {
                return 0;
            }
            p += 4;
            for (int c = 0; c < COUNTERS; c++) {
                out[c] = NAN;
            }
            continue;
        }
        if (p >= nl || *p++ != '[') {
            return 0;
        }
        for (int c = 0; c < COUNTERS; c++) {
            SKIP_WS(p, nl);
            if (c > 0) {
                if (p >= nl || *p++ != ',') {
                    return 0;
                }
                SKIP_WS(p, nl);
            }
            p = value_at(p, nl, out + c);
            if (p == NULL || ((shape->percent >> c) & 1 && out[c] > 100.0f)) {
                return 0;
            }
        }
        SKIP_WS(p, nl);
        if (p >= nl || *p++ != ']') {
            return 0;
        }
    }
    SKIP_WS(p, nl);
    if (p >= nl || *p++ != ']') {
        return 0;
    }
    SKIP_WS(p, nl);
    if (p >= nl || *p++ != '}') {
        return 0;
    }
    SKIP_WS(p, nl);
    if (p != nl) {
        return 0;
    }
    *t_row = (int64_t)t;
    return 1;
}

static PyObject *
scan(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer data, t_buf, v_buf;
    Py_ssize_t pos, devices, row, stride = 0;
    Shape shape;
    if (!PyArg_ParseTuple(args, "y*nnw*w*nLLI|n", &data, &pos, &devices, &t_buf, &v_buf, &row, &shape.t_min,
                          &shape.t_max, &shape.percent, &stride)) {
        return NULL;
    }
    shape.devices = devices;
    PyObject *result = NULL;
    Py_ssize_t width = devices * COUNTERS;
    if (devices < 1 || devices > MAX_DEVICES || pos < 0 || pos > data.len || row < 0 || stride < 0) {
        PyErr_SetString(PyExc_ValueError, "scan: pos, devices, row or stride out of range");
        goto done;
    }
    Py_ssize_t rows = t_buf.len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t v_rows = v_buf.len / ((Py_ssize_t)sizeof(float) * width);
    if (stride > 0) { /* device by device: a device's rows `stride` rows apart from the next device's */
        v_rows = v_buf.len / (Py_ssize_t)sizeof(float) / COUNTERS / devices >= stride ? stride : 0;
        shape.step = stride * COUNTERS;
        width = COUNTERS;
    } else {
        shape.step = COUNTERS;
    }
    if (v_rows < rows) {
        rows = v_rows;
    }
    const char *base = (const char *)data.buf;
    const char *end = base + data.len;
    const char *p = base + pos;
    int64_t *t_out = (int64_t *)t_buf.buf;
    float *v_out = (float *)v_buf.buf;
    Py_BEGIN_ALLOW_THREADS;
    while (p < end && row < rows) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (nl == NULL || !line_at(p, nl, &shape, t_out + row, v_out + row * width)) {
            break;
        }
        row++;
        p = nl + 1;
    }
    Py_END_ALLOW_THREADS;
    result = Py_BuildValue("nn", row, (Py_ssize_t)(p - base));
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&t_buf);
    PyBuffer_Release(&v_buf);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "scan(data, pos, devices, t_out, v_out, row, t_min, t_max, percent[, stride]) -> (row, pos): see the module."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_gpuscan", "A strict scanner for GPU sample lines (see _gpuscan.c).", -1, methods,
};

PyMODINIT_FUNC
PyInit__gpuscan(void)
{
    return PyModule_Create(&module);
}
