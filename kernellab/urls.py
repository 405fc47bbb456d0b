from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path

from kernellab.forms import LoginForm
from kernellab.views.problem_knobs import problem_knobs_page
from kernellab.views import cutlass, docs, explorer, lab, members, pages, problems, runs

urlpatterns = [
    path("", pages.home, name="home"),
    path("health", pages.health, name="health"),
    path("accounts/login/", auth_views.LoginView.as_view(template_name="registration/login.html",
                                                         authentication_form=LoginForm), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("w/<slug:slug>/", pages.workspace_detail, name="workspace"),
    path("w/<slug:slug>/runs/", pages.run_index, name="run-list"),
    path("w/<slug:slug>/verifications/", pages.verification_index, name="verification-queue"),
    path("w/<slug:slug>/verifications/decide", pages.verification_decide, name="verification-decide"),
    path("w/<slug:slug>/members/", members.member_list, name="member-list"),
    path("w/<slug:slug>/members/add", members.member_add, name="member-add"),
    path("w/<slug:slug>/members/invite", members.member_invite, name="member-invite"),
    path("w/<slug:slug>/members/<int:membership_id>/role", members.member_change_role, name="member-role"),
    path("w/<slug:slug>/members/<int:membership_id>/remove", members.member_remove, name="member-remove"),
    path("w/<slug:slug>/invitations/<int:invitation_id>/withdraw", members.invitation_withdraw, name="invitation-withdraw"),
    path("invitations/<str:token>/", members.invitation_page, name="invitation"),
    path("discoveries/", pages.discovery_index, name="discoveries"),
    path("discoveries.jsonl", pages.discovery_export, name="discoveries-export"),
    # Explorer pages (issue 6)
    path("w/<slug:slug>/problems/", problems.problem_list, name="problem-list"),
    path("w/<slug:slug>/problems/new", problems.problem_upload, name="problem-upload"),
    path("w/<slug:slug>/problems/new-pytorch", problems.problem_upload_pytorch, name="problem-upload-pytorch"),
    path("docs/spec", docs.spec_reference, name="spec-reference"),
    path("cutlass/", cutlass.cutlass_search_page, name="cutlass-search"),
    path("cutlass/file", cutlass.cutlass_file_page, name="cutlass-file"),
    path("problems/<int:problem_id>/", problems.problem_detail, name="problem-detail"),
    path("problems/<int:problem_id>/knobs", problem_knobs_page, name="problem-knobs"),
    path("problems/<int:problem_id>/runs/new", runs.run_new, name="run-new"),
    path("runs/<int:run_id>/", explorer.run_explorer, name="run-explorer"),
    path("runs/<int:run_id>/tree.json", explorer.run_tree_json, name="run-tree"),
    path("runs/<int:run_id>/action", runs.run_action, name="run-action"),
    path("runs/<int:run_id>/dashboard/", runs.run_dashboard_page, name="run-dashboard"),
    path("runs/<int:run_id>/cancel", runs.run_cancel_confirm, name="run-cancel"),
    path("runs/<int:run_id>/nodes/<str:key>/", explorer.node_panel, name="node-panel"),
    path("runs/<int:run_id>/nodes/<str:key>/comment", explorer.node_comment_create, name="node-comment"),
    path("runs/<int:run_id>/nodes/<str:key>/discovery", explorer.node_discovery_toggle, name="node-discovery"),
    path("runs/<int:run_id>/nodes/<str:key>/verify", explorer.node_verification_request, name="node-verify"),
    path("runs/<int:run_id>/nodes/<str:key>/decide", explorer.node_verification_decide, name="node-decide"),
    path("runs/<int:run_id>/nodes/<str:key>/child", explorer.node_child_create, name="node-child"),
    # Surrogate lab (issue 8)
    path("lab/", lab.lab_index, name="lab"),
    path("lab/datasets/upload", lab.dataset_upload, name="lab-dataset-upload"),
    path("lab/reports/", lab.report_list, name="lab-reports"),
    path("lab/reports/<str:report_id>/", lab.report_detail, name="lab-report"),
    path("lab/compare", lab.report_compare, name="lab-compare"),
]
