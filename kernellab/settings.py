"""Django settings for KernelLab. Every value comes from the environment (see kernellab.config)."""
from __future__ import annotations

import sys

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
    KERNELLAB_LLM = config.llm_endpoint()
    KERNELLAB_GPU_BUDGET_DEFAULT = config.env_int("KERNELLAB_GPU_BUDGET_DEFAULT", 40, minimum=1)
    KERNELLAB_VERIFY_TIME_LIMIT_S = config.env_int("KERNELLAB_VERIFY_TIME_LIMIT_S", 600, minimum=10)
    KERNELLAB_SEARCH_TIME_LIMIT_S = config.env_int("KERNELLAB_SEARCH_TIME_LIMIT_S", 900, minimum=10)
    KERNELLAB_STALE_RUNNING_S = config.env_int("KERNELLAB_STALE_RUNNING_S", 900, minimum=5)
    KERNELLAB_POLL_INTERVAL_S = config.env_float("KERNELLAB_POLL_INTERVAL_S", 0.3, minimum=0.05)
    KERNELLAB_PROBLEMS_DIR = __import__("os").environ.get("KERNELLAB_PROBLEMS_DIR", str(BASE_DIR / "kernellab" / "problems"))
    KERNELLAB_SERVE_STATIC = config.env_bool("KERNELLAB_SERVE_STATIC", True)
    KERNELLAB_RUNNER_BACKEND = __import__("os").environ.get("KERNELLAB_RUNNER_BACKEND", "auto")
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
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
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
                "kernellab.context_processors.navigation",
            ]
        },
    }
]
WSGI_APPLICATION = "kernellab.wsgi.application"
ASGI_APPLICATION = "kernellab.asgi.application"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 8}},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"

DATA_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024
KERNELLAB_UPLOAD_MAX_BYTES = 256 * 1024

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
