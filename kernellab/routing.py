from django.urls import path

from kernellab.consumers import RunConsumer

websocket_urlpatterns = [path("ws/runs/<int:run_id>/", RunConsumer.as_asgi())]
