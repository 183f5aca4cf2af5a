"""Print an htpasswd line (USER:bcrypt hash) for docker-registry's htpasswd auth.

Usage: python3 registry-htpasswd.py USER < PASSWORD
The hash comes from the node image's libcrypt (libxcrypt, bcrypt "$2b$"): Python 3.13 has
no crypt module and the image has no htpasswd; the registry accepts only bcrypt.
"""

import ctypes
import sys

lib = ctypes.CDLL("libcrypt.so.1")
lib.crypt_gensalt.restype = ctypes.c_char_p
lib.crypt_gensalt.argtypes = [ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int]
lib.crypt.restype = ctypes.c_char_p
lib.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]

user, password = sys.argv[1], sys.stdin.read().strip()
salt = lib.crypt_gensalt(b"$2b$", 10, None, 0)  # random bytes from the OS
hashed = lib.crypt(password.encode(), salt) if salt else None
if not hashed or not hashed.startswith(b"$2b$"):
    sys.exit("registry-htpasswd: libcrypt made no bcrypt hash")
print(f"{user}:{hashed.decode()}")
