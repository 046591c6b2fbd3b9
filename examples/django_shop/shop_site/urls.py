from django.contrib import admin
from django.urls import path
from shop import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("orders", views.checkout),
    path("orders/<int:order_id>/invoice-email", views.invoice_email),
]
