"""Django settings for KernelLab. Every value comes from the environment (see kernellab.config)."""
from __future__ import annotations

import sys

from django.utils.csp import CSP

from kernellab import config

BASE_DIR = config.BASE_DIR

try:
    DATA_DIR = config.data_dir()
    DEBUG = config.env_bool("DEBUG", True)
    SECRET_KEY = config.secret_key(DEBUG, DATA_DIR)
    ALLOWED_HOSTS = config.allowed_hosts()
    DATABASES = {"default": config.database_settings(DATA_DIR)}
    if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        # A file, not memory, so that worker processes started by tests see the test database.
        DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / f"test-kernellab-{__import__('os').getpid()}.sqlite3")}
    KERNELLAB_REDIS_URL = config.redis_url()
    CACHES = config.cache_settings(KERNELLAB_REDIS_URL)
    KERNELLAB_LLM = config.llm_endpoint()
    KERNELLAB_GPU_BUDGET_DEFAULT = config.env_int("KERNELLAB_GPU_BUDGET_DEFAULT", 40, minimum=1)
    KERNELLAB_VERIFY_TIME_LIMIT_S = config.env_int("KERNELLAB_VERIFY_TIME_LIMIT_S", 600, minimum=10)
    KERNELLAB_SEARCH_TIME_LIMIT_S = config.env_int("KERNELLAB_SEARCH_TIME_LIMIT_S", 900, minimum=10)
    KERNELLAB_STALE_RUNNING_S = config.env_int("KERNELLAB_STALE_RUNNING_S", 900, minimum=5)
    KERNELLAB_POLL_INTERVAL_S = config.env_float("KERNELLAB_POLL_INTERVAL_S", 0.3, minimum=0.05)
    KERNELLAB_PROBLEMS_DIR = __import__("os").environ.get("KERNELLAB_PROBLEMS_DIR", str(BASE_DIR / "kernellab" / "problems"))
    KERNELLAB_SERVE_STATIC = config.env_bool("KERNELLAB_SERVE_STATIC", True)
    KERNELLAB_RUNNER_BACKEND = config.runner_backend()
    # gpu_runner reads the compile engine itself at every compile, serve the web processes and asgi the trim
    # interval; reading them here stops start-up on a bad value with one sentence instead of a later traceback.
    KERNELLAB_COMPILE_ENGINE = config.compile_engine()
    KERNELLAB_WEB_PROCESSES = config.web_processes()
    # read by kernellab/asgi.py in each web process; read here so that a bad value stops every command at start-up
    KERNELLAB_WARM_START = config.warm_start()
    config.env_float("KERNELLAB_MALLOC_TRIM_S", 5.0)  # read by kernellab/asgi.py in each web process
except config.StartupError as exc:
    # One sentence and no traceback: the operator sees what to fix.
    sys.stderr.write(f"KernelLab cannot start: {exc}\n")
    raise SystemExit(2) from None

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "kernellab",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # before the CSRF check reads the POST: a post over DATA_UPLOAD_MAX_MEMORY_SIZE gets a page naming the limits
    "kernellab.views.request_limits.RequestTooBigMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # an htmx request whose session ended: HX-Redirect to the login page (a full page), not a login page in a panel
    "kernellab.views.htmx_login.HtmxLoginRedirectMiddleware",
    "kernellab.selectors.access.RolesPerRequestMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "kernellab.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "django.template.context_processors.csp",
                "kernellab.context_processors.navigation",
                "kernellab.context_processors.measurement_source",
                "kernellab.context_processors.request_limits",
            ]
        },
    }
]
WSGI_APPLICATION = "kernellab.wsgi.application"
ASGI_APPLICATION = "kernellab.asgi.application"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 8}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# Production behind TLS, login throttling and the problem size cap. The TLS settings are off by default
# so that the embedded setup works over plain HTTP; `manage.py check --deploy` names those still off.
try:
    SECURE_HSTS_SECONDS = config.env_int("KERNELLAB_HSTS_SECONDS", 0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = config.env_bool("KERNELLAB_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = config.env_bool("KERNELLAB_HSTS_PRELOAD", False)
    SECURE_SSL_REDIRECT = config.env_bool("KERNELLAB_SSL_REDIRECT", False)
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = config.env_bool("KERNELLAB_SECURE_COOKIES", False)
    KERNELLAB_BEHIND_TLS_PROXY = config.env_bool("KERNELLAB_BEHIND_TLS_PROXY", False)
    if KERNELLAB_BEHIND_TLS_PROXY:
        # Only safe when the proxy sets this header itself and strips it from what clients send. The login
        # throttle then counts per the right-most X-Forwarded-For entry, which the proxy must append.
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    KERNELLAB_LOGIN_MAX_FAILURES = config.env_int("KERNELLAB_LOGIN_MAX_FAILURES", 5, minimum=1)
    KERNELLAB_LOGIN_LOCKOUT_S = config.env_int("KERNELLAB_LOGIN_LOCKOUT_S", 900, minimum=1)
    from gpu_runner.spec import max_problem_bytes

    try:
        # gpu_runner reads the cap itself on every spec check; reading it here stops start-up on a bad value.
        KERNELLAB_MAX_PROBLEM_BYTES = max_problem_bytes()
    except ValueError as exc:
        raise config.StartupError(str(exc)) from None
except config.StartupError as exc:
    sys.stderr.write(f"KernelLab cannot start: {exc}\n")
    raise SystemExit(2) from None

# Scripts only from our own static files or inline blocks that carry the response's nonce. Styles
# allow inline: plotly and htmx set style elements and attributes at run time.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF, CSP.NONCE],
    "style-src": [CSP.SELF, CSP.UNSAFE_INLINE],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.SELF],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"

KERNELLAB_UPLOAD_MAX_BYTES = 256 * 1024   # each text of an upload form, pasted or as a file
# The form fields of a request together (files aside): the upload form's three texts at their limit,
# each doubled by the CRLF line ends a browser sends, and room for the small fields, so that a text over its
# own limit gets the form's sentence. A post beyond it gets kernellab.views.request_limits' page.
DATA_UPLOAD_MAX_MEMORY_SIZE = max(2 * 1024 * 1024, 3 * 2 * KERNELLAB_UPLOAD_MAX_BYTES + 64 * 1024)
FILE_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024

if KERNELLAB_REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [KERNELLAB_REDIS_URL], "capacity": 5000, "expiry": 30},
        }
    }
else:
    # Without Redis, websocket consumers read changes from the database (see consumers.py).
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Celery: the database row is the truth; tasks only move it along.
if KERNELLAB_REDIS_URL:
    CELERY_BROKER_URL = KERNELLAB_REDIS_URL
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": config.env_int("KERNELLAB_VISIBILITY_TIMEOUT_S", 3600, minimum=1),
    }
else:
    _broker_dir = DATA_DIR / "broker"
    _broker_dir.mkdir(exist_ok=True)
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir),
        "data_folder_out": str(_broker_dir),
        "processed_folder": str(_broker_dir),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
        # The default one-second poll caps each local worker at about one job a second.
        "polling_interval": 0.1,
    }
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = KERNELLAB_VERIFY_TIME_LIMIT_S
CELERY_TASK_TIME_LIMIT = KERNELLAB_VERIFY_TIME_LIMIT_S + 60
CELERY_TASK_DEFAULT_QUEUE = "search"
CELERY_TASK_ALWAYS_EAGER = config.env_bool("KERNELLAB_TASKS_EAGER", False)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {"kernellab": {"level": "INFO"}},
}
