from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path

from kernellab.views import pages

urlpatterns = [
    path("", pages.home, name="home"),
    path("health", pages.health, name="health"),
    path("accounts/login/", auth_views.LoginView.as_view(template_name="registration/login.html"), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("w/<slug:slug>/", pages.workspace_detail, name="workspace"),
    path("w/<slug:slug>/runs/", pages.run_index, name="run-list"),
    path("w/<slug:slug>/verifications/", pages.verification_index, name="verification-queue"),
    path("w/<slug:slug>/verifications/decide", pages.verification_decide, name="verification-decide"),
    path("discoveries/", pages.discovery_index, name="discoveries"),
    path("discoveries.jsonl", pages.discovery_export, name="discoveries-export"),
]
