#!/usr/bin/env python3
# devices_test.py — `ember devices` and `ember devices --json`: both succeed,
# the JSON lists every device with the fields ember reports and marks
# exactly one default. Exit 77 (SKIP) when there is no Vulkan device.
import json
import re
import subprocess
import sys

# the one failure that is a SKIP: no Vulkan device on this machine at all
# (EM_ENODEV); a lost device or validation errors fail the test
NO_DEVICE = re.compile(r'ember: vulkan: no (usable )?Vulkan device')

ember = sys.argv[1]
r = subprocess.run([ember, 'devices', '--json'], stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE, text=True)
if r.returncode != 0:
    if NO_DEVICE.match(r.stderr):
        print('SKIP: ' + r.stderr.strip())
        sys.exit(77)
    sys.exit('ember devices --json failed (%d): %s' % (r.returncode, r.stderr))
doc = json.loads(r.stdout)
devs = doc['devices']
assert devs, 'no devices listed'
assert sum(d['default'] for d in devs) == 1, 'not exactly one default'
assert devs[doc['default']]['default']
for d in devs:
    for key in ('name', 'vendor', 'type', 'driver_name', 'driver_info', 'driver_version',
                'api_version', 'heaps', 'subgroup', 'features', 'limits', 'usable'):
        assert key in d, 'device %d lacks %s' % (d['index'], key)
    for f in ('storage16', 'storage8', 'float16', 'int8', 'dot', 'sg_arith', 'sg_shuffle',
              'sg_size_control'):
        assert f in d['features'], 'feature %s missing' % f
    for lim in ('max_storage_buffer_range', 'max_memory_allocation_size',
                'max_compute_workgroup_invocations', 'max_compute_shared_memory_size',
                'min_storage_buffer_offset_alignment', 'max_push_constants_size',
                'timestamp_period_ns'):
        assert lim in d['limits'], 'limit %s missing' % lim

r = subprocess.run([ember, 'devices'], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                   text=True)
assert r.returncode == 0, r.stderr
default = devs[doc['default']]
assert ('* %d: %s' % (default['index'], default['name'])) in r.stdout, r.stdout
for word in ('vendor', 'driver', 'memory', 'subgroups', 'features', 'limits'):
    assert word in r.stdout, word

r = subprocess.run([ember, 'devices', '--bogus'], stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE, text=True)
assert r.returncode == 2, r.returncode
print('devices: ok (%d device%s, default %s)' % (len(devs), '' if len(devs) == 1 else 's',
                                                 default['name']))
